// `moescope report [--format text|markdown|json] [-o FILE] [--detail] TRACE...`: loads the
// traces (any mix of .moetrace and Kineto JSON), runs every analysis and prints the ranked
// findings. Where rank summaries exist (`moescope summarize`) it reads them instead of the
// events, with the same numbers; --detail forces the traces.
#include <CLI/CLI.hpp>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/what_happened.h"
#include "run_inputs.h"

namespace moescope::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> traces;
  std::string format = "text";
  std::string output;
  bool quiet = false;
  bool detail = false;  // the full traces even where summaries exist
};

// A one-line progress indicator on stderr for long loads (only on a terminal).
analysis::LoadOptions load_options_with_progress(bool quiet) {
  analysis::LoadOptions options;
  if (!quiet && isatty(STDERR_FILENO)) options.progress = analysis::line_progress(stderr);
  return options;
}

void finish_report(const analysis::TraceModel& model, const std::vector<analysis::RankFacts>* facts,
                   analysis::ReportFormat format, const ReportOptions& options);

void run_report(const ReportOptions& options) {
  analysis::ReportFormat format;
  if (!analysis::parse_report_format(options.format, format)) {
    throw CLI::ValidationError("--format",
                               "must be text, markdown or json, got '" + options.format + "'");
  }
  const std::vector<std::string> traces = analysis::recorded_trace_files(options.traces);
  // Summaries where they exist (summary_load.h), unless --detail asks for the events.
  if (!options.detail && analysis::any_rank_summary(traces)) {
    analysis::SummaryLoad loaded =
        analysis::load_rank_summaries(traces, load_options_with_progress(options.quiet));
    for (const std::string& note : loaded.notes) {
      std::fprintf(stderr, "moescope report: note: %s\n", note.c_str());
    }
    if (!loaded.refused.empty()) {
      std::fprintf(stderr, "moescope report: %s\n", loaded.refused.c_str());
      throw CLI::RuntimeError(1);
    }
    if (!loaded.needs_traces) {
      finish_report(loaded.model, &loaded.facts, format, options);
      return;
    }
  }
  // A summary given by name stands for its trace here (--detail, or a fallback above).
  analysis::TraceModel model = analysis::load_traces(analysis::trace_inputs(traces),
                                                     load_options_with_progress(options.quiet));
  finish_report(model, nullptr, format, options);
}

// Reports `model`; `facts`: per-rank facts read from summaries (null: from the model's events).
void finish_report(const analysis::TraceModel& model, const std::vector<analysis::RankFacts>* facts,
                   analysis::ReportFormat format, const ReportOptions& options) {
  report_load_errors(model, "report", "the given trace(s)");
  analysis::Report report =
      facts ? analysis::build_report(model, *facts) : analysis::build_report(model);
  std::string rendered = analysis::render_report(model, report, format);
  // Flight-recorder dumps: "what happened" comes first (what_happened.h).
  analysis::WhatHappened what = analysis::explain_dump(model);
  if (what.any && format == analysis::ReportFormat::kJson) {
    nlohmann::json parsed = nlohmann::json::parse(rendered, nullptr, false);
    if (parsed.is_object()) {
      parsed["what_happened"] = nlohmann::json::parse(analysis::what_happened_json(what));
      rendered = parsed.dump(2) + "\n";
    }
  } else if (what.any) {
    rendered = analysis::render_what_happened(what, format) + rendered;
  }
  write_command_output(rendered, options.output);
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto* command = app.add_subcommand(
      "report", "Analyse traces: time breakdown, expert load, communication, memory, findings");
  command
      ->add_option(
          "traces", options->traces,
          "Trace files (.moetrace, Kineto .json[.gz]), or a run's folder of .moetrace files")
      ->required();
  command->add_option("--format", options->format, "text, markdown or json")->capture_default_str();
  command->add_option("-o,--output", options->output, "Write the report to FILE");
  command->add_flag("-q,--quiet", options->quiet, "No progress indicator");
  add_detail_flag(*command, options->detail);
  command->callback([options] { run_reporting_errors("report", [&] { run_report(*options); }); });
}

}  // namespace moescope::cli
