// Where `moescope record -o PATTERN` writes, checked before the program starts: the folders
// are created (as torch's tensorboard_trace_handler does), and a pattern that cannot name a
// writable trace file stops `record` before anything runs.
#pragma once

#include <string>

namespace moescope::cli {

// Creates the folders of `pattern` (an absolute trace path pattern, %-fields allowed in the
// file name only) and checks that a trace can be written there. Returns "" when it can, else
// what is wrong, e.g. "/tmp/x is a directory (name a file: -o /tmp/x/run.%r.moetrace)".
std::string prepare_trace_output(const std::string& pattern);

// True when `path` is a trace this run wrote: a readable .moetrace whose metadata names
// `session` (not a directory, a /proc entry, or another run's file the pattern matches).
bool written_by_session(const std::string& path, const std::string& session);

}  // namespace moescope::cli
