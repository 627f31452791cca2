// `moescope metrics TRACE... --jsonl FILE | --tensorboard DIR [--metrics-detail]`: the bounded
// per-step MoE health metric set (analysis/step_metrics.h, docs/metrics.md) of recorded traces,
// as JSON lines ({"step": N, "scalars": {name: value}}) or as a TensorBoard event file.
// `moescope metrics --list` prints the catalogue.
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/step_metrics.h"
#include "moescope/analysis/tensorboard_events.h"
#include "moescope/analysis/trace_loader.h"
#include "run_inputs.h"

namespace moescope::cli {
namespace {

struct MetricsOptions {
  std::vector<std::string> traces;
  std::string jsonl;
  std::string tensorboard;
  bool detail = false;
  bool list = false;
  bool quiet = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "moescope metrics: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

std::string render_jsonl(const std::vector<analysis::StepMetrics>& steps) {
  std::string text;
  for (const analysis::StepMetrics& step : steps) {
    nlohmann::ordered_json scalars = nlohmann::ordered_json::object();
    for (const analysis::MetricValue& value : step.values) scalars[value.name] = value.value;
    nlohmann::ordered_json line = {{"step", step.step}, {"scalars", scalars}};
    text += line.dump() + "\n";
  }
  return text;
}

void write_tensorboard(const std::vector<analysis::StepMetrics>& steps,
                       const std::string& directory) {
  analysis::TensorBoardEventWriter writer(directory);
  if (!writer.ok()) fail(writer.error());
  const double now = double(std::time(nullptr));
  for (const analysis::StepMetrics& step : steps) {
    for (const analysis::MetricValue& value : step.values) {
      writer.add_scalar(value.name, value.value, step.step, now);
    }
  }
  if (!writer.close()) fail(writer.error());
}

void print_catalogue() {
  std::printf("%-28s %-8s %s\n", "series (moescope/...)", "unit", "meaning");
  for (const analysis::MetricDefinition& row : analysis::metric_catalogue()) {
    std::printf("%-28s %-8s %s\n", row.name, row.unit, row.meaning);
  }
  std::printf("\nAt most %zu series per MoE layer + %zu global (docs/metrics.md).\n",
              analysis::kMaxSeriesPerLayer, analysis::kMaxGlobalSeries);
}

void run_metrics(const MetricsOptions& options) {
  if (options.list) {
    print_catalogue();
    return;
  }
  if (options.traces.empty()) fail("no trace given (moescope metrics TRACE... --jsonl FILE)");
  if (options.jsonl.empty() && options.tensorboard.empty()) {
    fail("say where the metrics go: --jsonl FILE (- for stdout) and/or --tensorboard DIR");
  }
  analysis::LoadOptions load;
  if (!options.quiet && isatty(STDERR_FILENO)) load.progress = analysis::line_progress(stderr);
  analysis::TraceModel model =
      analysis::load_traces(analysis::recorded_trace_files(options.traces), load);
  report_load_errors(model, "metrics", "the given trace(s)");
  analysis::MetricOptions metric_options;
  metric_options.per_expert_shares = options.detail;
  std::vector<analysis::StepMetrics> steps = analysis::compute_step_metrics(model, metric_options);
  if (steps.empty()) {
    std::fprintf(stderr,
                 "moescope metrics: no step with expert load or step times in the "
                 "trace(s): nothing written\n");
  }
  if (!options.jsonl.empty()) write_command_output(render_jsonl(steps), options.jsonl);
  if (!options.tensorboard.empty()) write_tensorboard(steps, options.tensorboard);
  if (!options.quiet && options.jsonl != "-") {
    std::fprintf(stderr, "moescope metrics: %zu steps, %zu series\n", steps.size(),
                 analysis::count_series(steps));
  }
}

}  // namespace

void add_metrics_command(CLI::App& app) {
  auto options = std::make_shared<MetricsOptions>();
  auto* command =
      app.add_subcommand("metrics",
                         "Per-step MoE health scalars (expert balance, step time, exposed comm, "
                         "stragglers, memory) as JSON lines or TensorBoard events");
  command->add_option(
      "traces", options->traces,
      "Trace files (.moetrace, Kineto .json[.gz]), or a run's folder of .moetrace files");
  command->add_option("--jsonl", options->jsonl,
                      "Write one JSON line per step to FILE (- for stdout)");
  command->add_option("--tensorboard", options->tensorboard,
                      "Write a TensorBoard event file into DIR (created when missing)");
  command->add_flag("--metrics-detail", options->detail,
                    "Add each expert's share of tokens per layer (layers x experts series)");
  command->add_flag("--list", options->list, "Print the series and what they mean");
  command->add_flag("-q,--quiet", options->quiet, "No progress or summary on stderr");
  command->callback([options] { run_reporting_errors("metrics", [&] { run_metrics(*options); }); });
}

}  // namespace moescope::cli
