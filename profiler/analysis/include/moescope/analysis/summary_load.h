// Reads the rank summaries of a job (rank_summary.h) into the model the report runs on: one
// ProcessTrack skeleton per rank, the expert-load samples, and each rank's RankFacts, aligned
// on one clock like load_traces does. Memory grows with ranks x steps, never with events.
//
// Inputs may be traces (their summary beside them is read: run.3.moetrace -> run.3.moesummary)
// or summaries themselves. Per rank: a missing, damaged or stale summary (its trace changed
// since) falls back to loading that rank's trace, with a note. Summaries of different runs
// (run ids) are refused with an error naming both.
#pragma once

#include <string>
#include <vector>

#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct SummaryLoad {
  TraceModel model;                // skeletons (no spans, kernels, counters, memory events)
  std::vector<RankFacts> facts;    // per process of `model`
  std::vector<std::string> notes;  // each rank that fell back to its trace, and why
  // Non-empty: the inputs cannot be reported together (summaries of different runs).
  std::string refused;
  // The inputs need the full-trace path (the reason is in `notes`): steps chosen across ranks
  // (a guessed repeating range), ranks with different step sources, flight-recorder dumps.
  bool needs_traces = false;
};

// True when some input is a summary or has one beside it (the report then reads summaries).
bool any_rank_summary(const std::vector<std::string>& paths);

// The inputs for the full-trace path: a summary given by name stands for the trace it was
// written beside ("x.moesummary" -> "x.moetrace"); traces stay as they are.
std::vector<std::string> trace_inputs(const std::vector<std::string>& paths);

SummaryLoad load_rank_summaries(const std::vector<std::string>& paths,
                                const LoadOptions& options = {});

}  // namespace moescope::analysis
