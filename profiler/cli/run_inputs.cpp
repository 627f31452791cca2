// Summaries where present, else traces (run_inputs.h).
#include "run_inputs.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "moescope/analysis/rank_facts.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::cli {

RunInputs load_run_inputs(const std::vector<std::string>& given, bool detail,
                          const std::string& command) {
  const std::vector<std::string> paths = analysis::recorded_trace_files(given);
  RunInputs run;
  if (!detail && analysis::any_rank_summary(paths)) {
    analysis::SummaryLoad loaded = analysis::load_rank_summaries(paths);
    for (const std::string& note : loaded.notes) {
      std::fprintf(stderr, "moescope %s: note: %s\n", command.c_str(), note.c_str());
    }
    if (!loaded.refused.empty()) throw std::runtime_error(loaded.refused);
    if (!loaded.needs_traces) {
      run.breakdown = analysis::time_breakdown_of_facts(loaded.facts);
      run.facts = std::move(loaded.facts);
      run.model = std::move(loaded.model);
      run.from_summaries = true;
      return run;
    }
  }
  run.model = analysis::load_traces(analysis::trace_inputs(paths));
  return run;
}

void report_load_errors(const analysis::TraceModel& model, const std::string& prefix,
                        const std::string& what) {
  bool refused = false;
  for (const analysis::LoadError& error : model.errors) {
    std::fprintf(stderr, "moescope %s: %s\n", prefix.c_str(), error.to_string().c_str());
    refused |= error.refused;
  }
  if (refused) throw std::runtime_error("an input of " + what + " was refused (above)");
  if (model.processes.empty()) throw std::runtime_error("nothing readable in " + what);
}

void add_detail_flag(CLI::App& command, bool& detail) {
  command.add_flag("--detail", detail,
                   "Read the full traces even where rank summaries (moescope summarize) exist");
}

void add_step_sample_options(CLI::App& command, size_t& skip_steps, size_t& max_batches) {
  command.add_option("--skip-steps", skip_steps, "Warm-up steps left out at the start of each run")
      ->capture_default_str();
  command
      .add_option("--batches", max_batches,
                  "At most this many batches of consecutive steps per run (batch means)")
      ->check(CLI::Range(2, 1000))
      ->capture_default_str();
}

}  // namespace moescope::cli
