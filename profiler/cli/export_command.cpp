// `moescope export --chrome OUT.json TRACE...`: Chrome trace JSON for Perfetto,
// chrome://tracing and HolisticTraceAnalysis. With --split-ranks, one file per rank
// (OUT with ".json" replaced by ".rank<N>.json"), which is what HTA reads.
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>
#include <memory>

#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/trace_loader.h"
#include "run_inputs.h"

namespace moescope::cli {
namespace {

struct ExportOptions {
  std::vector<std::string> traces;
  std::string chrome_output;
  bool split_ranks = false;
  bool no_flows = false;
  bool no_counters = false;
  bool quiet = false;
};

std::string rank_path(const std::string& path, int32_t rank) {
  std::string stem = path;
  if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0) {
    stem.resize(stem.size() - 5);
  }
  return stem + ".rank" + std::to_string(rank) + ".json";
}

void run_export(const ExportOptions& options) {
  analysis::LoadOptions load_options;  // a progress line on long loads, on a terminal
  if (!options.quiet && isatty(STDERR_FILENO))
    load_options.progress = analysis::line_progress(stderr);
  analysis::TraceModel model =
      analysis::load_traces(analysis::recorded_trace_files(options.traces), load_options);
  report_load_errors(model, "export", "the given trace(s)");
  analysis::ChromeExportOptions export_options;
  export_options.flows = !options.no_flows;
  export_options.counters = !options.no_counters;
  std::vector<std::pair<std::string, int32_t>> outputs;
  if (options.split_ranks) {
    for (const auto& process : model.processes) {
      outputs.push_back({rank_path(options.chrome_output, process.rank), process.rank});
    }
  } else {
    outputs.push_back({options.chrome_output, -1});
  }
  for (const auto& [path, rank] : outputs) {
    export_options.only_rank = rank;
    analysis::ChromeExportResult result =
        analysis::export_chrome_trace(model, path, export_options);
    if (!result.ok) {
      std::fprintf(stderr, "moescope export: %s\n", result.error.c_str());
      throw CLI::RuntimeError(1);
    }
    std::printf("wrote %s: %llu events, %.1f MB\n", path.c_str(),
                static_cast<unsigned long long>(result.events), double(result.bytes) / 1e6);
  }
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto options = std::make_shared<ExportOptions>();
  auto* command = app.add_subcommand("export", "Convert traces to Chrome trace JSON");
  command
      ->add_option(
          "traces", options->traces,
          "Trace files (.moetrace, Kineto .json[.gz]), or a run's folder of .moetrace files")
      ->required();
  command->add_option("--chrome", options->chrome_output, "Output Chrome trace JSON file")
      ->required();
  command->add_flag("--split-ranks", options->split_ranks,
                    "One file per rank: OUT.rank<N>.json (for HolisticTraceAnalysis)");
  command->add_flag("--no-flows", options->no_flows, "Leave out launch -> GPU flow arrows");
  command->add_flag("--no-counters", options->no_counters, "Leave out memory and expert counters");
  command->add_flag("-q,--quiet", options->quiet, "No progress indicator");
  command->callback([options] { run_reporting_errors("export", [&] { run_export(*options); }); });
}

}  // namespace moescope::cli
