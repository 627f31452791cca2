#include "loaded_trace.h"

#include <chrono>

#include "moescope/profiler/trace_loader.h"

namespace moescope::viewer {

TraceLoadingJob::TraceLoadingJob(std::vector<std::string> files) : files_(std::move(files)) {
  thread_ = std::thread([this] { run(); });
}

TraceLoadingJob::~TraceLoadingJob() {
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<LoadedTrace> TraceLoadingJob::take_result() {
  if (!done()) return nullptr;
  return std::move(result_);
}

void TraceLoadingJob::run() {
  auto started = std::chrono::steady_clock::now();
  auto trace = std::make_unique<LoadedTrace>();
  trace->files = files_;
  analysis::LoadOptions options;
  options.cancel = &cancel_;
  options.progress = [this](const analysis::LoadProgress& progress) {
    double fraction =
        progress.bytes_total > 0
            ? static_cast<double>(progress.bytes_done) / progress.bytes_total
            : static_cast<double>(progress.files_done) / std::max<size_t>(progress.files_total, 1);
    progress_.store(static_cast<float>(0.9 * fraction), std::memory_order_relaxed);
  };
  trace->model = analysis::load_traces(files_, options);
  stage_.store("indexing");
  progress_.store(0.9f);
  trace->timeline = build_timeline_index(trace->model);
  trace->steps = known_steps(trace->model);
  trace->load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result_ = std::move(trace);
  progress_.store(1.0f);
  done_.store(true, std::memory_order_release);
}

TraceTablesJob::TraceTablesJob(const LoadedTrace& trace) {
  thread_ = std::thread([this, &trace] {
    tables_.kernel_stats = kernel_statistics(trace.model);
    tables_.range_stats = range_statistics(trace.model);
    tables_.findings = compute_viewer_findings(trace.model);
    done_.store(true, std::memory_order_release);
  });
}

TraceTablesJob::~TraceTablesJob() {
  if (thread_.joinable()) thread_.join();
}

void TraceTablesJob::move_into(LoadedTrace& trace) {
  trace.kernel_stats = std::move(tables_.kernel_stats);
  trace.range_stats = std::move(tables_.range_stats);
  trace.findings = std::move(tables_.findings);
  trace.tables_ready = true;
}

}  // namespace moescope::viewer
