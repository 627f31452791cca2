// The rank summaries `moescope record` writes when the recorded program has ended: one
// `moescope summarize` child per trace (run.3.moetrace -> run.3.moesummary, rank_summary.h), on
// the node where the ranks ran, a few at a time. A child is used rather than the analysis in
// this process so that a trace the analysis cannot take (or a crash in it) costs that one
// summary, never `record`'s exit status: a failure is one line on stderr, nothing else.
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace moescope::cli {

// Writes each trace's summary beside it, at most `parallel` (>= 1) at a time; says on stderr,
// one line each, which traces got none and why. Returns early, stopping the children and
// leaving no partial file, once `*stop` becomes non-zero (a signal to `record`); the traces not
// summarized then are named in one line. Returns how many summaries were written.
size_t write_summaries_beside(const std::vector<std::string>& traces, unsigned parallel,
                              const volatile sig_atomic_t* stop);

}  // namespace moescope::cli
