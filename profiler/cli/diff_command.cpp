// `moescope diff BASE... --against NEW... [--format text|markdown|json] [-o FILE]
//  [--skip-steps N] [--confidence C] [--run-to-run MS] [--predicted PLAN.json] [--detail]`:
// compares two runs step by step (analysis/run_diff.h) and, given the JSON of `moescope plan`
// on the base run, checks the plan's predicted rank load and step-time change against the new
// run. Reads the ranks' summaries where they exist, with the same numbers (run_inputs.h);
// --detail forces the traces.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/trace_loader.h"
#include "plan_inputs.h"
#include "run_inputs.h"

namespace moescope::cli {
namespace {

struct DiffCommandOptions {
  std::vector<std::string> base_traces;
  std::vector<std::string> next_traces;
  std::string format = "text";
  std::string output;
  std::string predicted;
  size_t skip_steps = 1;
  double confidence = 0.95;
  size_t max_batches = 10;
  double run_to_run_ms = 0;
  bool detail = false;  // the full traces even where rank summaries exist
};

// One run: its ranks' summaries where they exist (same numbers), else its traces.
RunInputs load_run(const std::vector<std::string>& traces, bool detail, const char* which) {
  RunInputs run = load_run_inputs(traces, detail, std::string("diff: ") + which + " run");
  report_load_errors(run.model, std::string("diff: ") + which + " run",
                     std::string("the ") + which + " run's trace(s)");
  return run;
}

void run_diff(const DiffCommandOptions& options) {
  analysis::DiffFormat format;
  if (!analysis::parse_diff_format(options.format, format)) {
    throw CLI::ValidationError("--format",
                               "must be text, markdown or json, got '" + options.format + "'");
  }
  std::optional<analysis::PlacementPrediction> prediction;
  if (!options.predicted.empty()) prediction = read_prediction(options.predicted);
  const RunInputs base = load_run(options.base_traces, options.detail, "base");
  const RunInputs next = load_run(options.next_traces, options.detail, "new");
  analysis::DiffOptions diff_options;
  diff_options.skip_steps = options.skip_steps;
  diff_options.confidence = options.confidence;
  diff_options.max_batches = options.max_batches;
  diff_options.run_to_run_ms = options.run_to_run_ms;
  analysis::RunDiff diff = analysis::diff_runs(base.model, next.model, diff_options,
                                               base.facts_or_null(), next.facts_or_null());
  if (prediction) {
    analysis::check_prediction(diff, next.model, std::move(*prediction), next.facts_or_null());
  }
  write_command_output(analysis::render_diff(diff, format), options.output);
}

}  // namespace

void add_diff_command(CLI::App& app) {
  auto options = std::make_shared<DiffCommandOptions>();
  auto* command = app.add_subcommand(
      "diff",
      "Compare two runs: step time and its breakdown, phases, spans, collectives, expert load, "
      "stragglers and findings, with confidence intervals from each run's step-to-step noise");
  command
      ->add_option("base", options->base_traces,
                   "The base run's trace files (one per rank), their summaries, or its folder")
      ->required();
  command->add_option("--against", options->next_traces, "The new run's trace files, or its folder")
      ->required();
  command->add_option("--format", options->format, "text, markdown or json")->capture_default_str();
  command->add_option("-o,--output", options->output, "Write the comparison to FILE");
  add_step_sample_options(*command, options->skip_steps, options->max_batches);
  command
      ->add_option("--confidence", options->confidence,
                   "Confidence of the intervals, together over every row compared")
      ->check(CLI::Range(0.5, 0.9999))
      ->capture_default_str();
  command
      ->add_option("--run-to-run", options->run_to_run_ms,
                   "MS: the standard deviation of the mean step time between repeated runs of "
                   "the same program, measured beforehand (record the same run again; "
                   "docs/analysis.md); the step time's interval and the --predicted check "
                   "include it. Default 0: they cover the noise inside each run only")
      ->check(CLI::Range(0.0, 1e6));
  add_detail_flag(*command, options->detail);
  command->add_option("--predicted", options->predicted,
                      "A `moescope plan --json` file planned from the base run: compare its "
                      "predicted rank load and step time change with the new run");
  command->callback([options] { run_reporting_errors("diff", [&] { run_diff(*options); }); });
}

}  // namespace moescope::cli
