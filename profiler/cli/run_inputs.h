// The run a command analyses, from the files the user named: the ranks' summaries where they
// exist (rank_summary.h; each missing, damaged or stale one falls back to its trace, with a
// note), else, or with --detail, the full traces. Shared by `plan` and `diff` so that they give
// the numbers of the full-trace path from summaries (the same rule `report` follows).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace CLI {
class App;
}

namespace moescope::cli {

struct RunInputs {
  analysis::TraceModel model;  // from summaries: skeletons without spans, kernels or memory
  // From summaries: the ranks' time breakdown they hold (the model's events cannot give it);
  // empty on the full-trace path (compute_time_breakdown of the model is the same).
  std::optional<analysis::TimeBreakdown> breakdown;
  std::vector<analysis::RankFacts> facts;  // from summaries: per process of `model`
  bool from_summaries = false;
  const std::vector<analysis::RankFacts>* facts_or_null() const {
    return from_summaries ? &facts : nullptr;
  }
  const analysis::TimeBreakdown* breakdown_or_null() const {
    return breakdown ? &*breakdown : nullptr;
  }
};

// Loads `paths` (traces, or summaries standing for their traces; a folder stands for its
// traces, analysis::recorded_trace_files). Notes go to stderr as
// "moescope COMMAND: note: ..."; load errors stay in model.errors for the caller to print.
// Throws std::runtime_error when the summaries cannot be used together (different runs).
RunInputs load_run_inputs(const std::vector<std::string>& paths, bool detail,
                          const std::string& command);

// Prints each load error of `model` to stderr as "moescope PREFIX: ERROR" (damage: what was
// readable is still used). Throws std::runtime_error when an input was refused (input_checks:
// the files cannot be analysed as one run) or when nothing in `what` was readable.
void report_load_errors(const analysis::TraceModel& model, const std::string& prefix,
                        const std::string& what);

// --detail: the full traces even where summaries exist (every command that reads runs).
void add_detail_flag(CLI::App& command, bool& detail);
// --skip-steps and --batches: which steps of each run its per-step statistics take, and how
// they are batched (difference_interval.h): `diff` and `noise` take the same.
void add_step_sample_options(CLI::App& command, size_t& skip_steps, size_t& max_batches);

}  // namespace moescope::cli
