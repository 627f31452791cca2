#include "fuzz_pipeline.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/trace_loader.h"

namespace moescope::fuzz {

void run_whole_pipeline(const std::vector<std::string>& paths) {
  analysis::LoadOptions options;
  options.max_threads = 1;  // one input at a time; the fuzzer is the parallelism
  const analysis::TraceModel model = analysis::load_traces(paths, options);
  const analysis::Report report = analysis::build_report(model);
  for (auto format : {analysis::ReportFormat::kText, analysis::ReportFormat::kMarkdown,
                      analysis::ReportFormat::kJson}) {
    (void)analysis::render_report(model, report, format);
  }
  static std::FILE* sink = std::fopen("/dev/null", "w");
  const analysis::ChromeExportResult exported = analysis::export_chrome_trace(model, sink);
  if (!exported.ok) {
    std::fprintf(stderr, "export failed: %s\n", exported.error.c_str());
    std::abort();
  }
  analysis::DiffOptions diff_options;
  diff_options.skip_steps = 0;
  analysis::RunDiff diff = analysis::diff_runs(model, model, diff_options);
  (void)analysis::render_diff(diff, analysis::DiffFormat::kJson);
  (void)analysis::render_diff(diff, analysis::DiffFormat::kText);
}

std::string scratch_path(const std::string& suffix) {
  const char* directory = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  return std::string(directory) + "/moescope-fuzz-" + std::to_string(::getpid()) + suffix;
}

bool write_file(const std::string& path, const void* data, size_t size) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return false;
  const bool ok = std::fwrite(data, 1, size, file) == size;
  return std::fclose(file) == 0 && ok;
}

}  // namespace moescope::fuzz
