// `moescope summarize [-q] TRACE|FOLDER...`: writes each trace's rank summary beside it
// (run.3.moetrace -> run.3.moesummary; rank_summary.h). One file at a time and independent of
// the others, so a job's traces fan out with `xargs -P`, `srun` or a Dask cluster.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::cli {
namespace {

struct SummarizeOptions {
  std::vector<std::string> traces;
  bool quiet = false;
};

// Writes one trace's summary; false (after saying why on stderr) when it cannot.
bool summarize_one(const std::string& trace, bool quiet) {
  if (analysis::is_summary_path(trace)) {
    std::fprintf(stderr, "moescope summarize: %s is a summary already\n", trace.c_str());
    return false;
  }
  analysis::LoadOptions options;
  analysis::TraceModel model = analysis::load_traces({trace}, options);
  bool refused = false;
  for (const auto& error : model.errors) refused |= error.refused;
  if (refused || model.processes.size() != 1) {
    for (const auto& error : model.errors) {
      std::fprintf(stderr, "moescope summarize: %s\n", error.to_string().c_str());
    }
    std::fprintf(stderr, "moescope summarize: %s: no summary (nothing readable)\n", trace.c_str());
    return false;
  }
  std::error_code size_error;
  const uint64_t bytes = std::filesystem::file_size(trace, size_error);
  const analysis::RankSummary summary =
      analysis::summarize_process(model, 0, size_error ? 0 : bytes);
  const std::string path = analysis::summary_path_for(trace);
  std::string error;
  if (!analysis::write_rank_summary(path, summary, error)) {
    std::fprintf(stderr, "moescope summarize: %s\n", error.c_str());
    return false;
  }
  if (!quiet) {
    std::printf("%s: rank %d, %zu steps, %llu events -> %s (%llu bytes)\n", trace.c_str(),
                summary.process.rank, summary.process.steps.size(),
                static_cast<unsigned long long>(summary.process.events), path.c_str(),
                static_cast<unsigned long long>(std::filesystem::file_size(path, size_error)));
  }
  return true;
}

}  // namespace

void add_summarize_command(CLI::App& app) {
  auto options = std::make_shared<SummarizeOptions>();
  auto* command = app.add_subcommand(
      "summarize",
      "Write each trace's rank summary beside it (TRACE.moesummary), which report reads instead "
      "of the events");
  command
      ->add_option("traces", options->traces,
                   "Trace files (.moetrace, Kineto .json[.gz]), or folders of them")
      ->required();
  command->add_flag("-q,--quiet", options->quiet, "Print nothing on success");
  command->callback([options] {
    bool all = true;
    for (const std::string& given : options->traces) {
      std::vector<std::string> traces;
      try {
        traces = analysis::recorded_trace_files({given});
      } catch (const std::exception& error) {
        std::fprintf(stderr, "moescope summarize: %s\n", error.what());
        all = false;
      }
      for (const std::string& trace : traces) all &= summarize_one(trace, options->quiet);
    }
    if (!all) throw CLI::RuntimeError(1);
  });
}

}  // namespace moescope::cli
