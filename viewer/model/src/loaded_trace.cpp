#include "moescope/viewer/loaded_trace.h"

#include <algorithm>
#include <chrono>

#include "moescope/analysis/report.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/what_happened.h"

namespace moescope::viewer {

TraceLoadingJob::TraceLoadingJob(std::vector<std::string> files, uint64_t preview_events)
    : files_(std::move(files)), preview_events_(preview_events) {
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

std::unique_ptr<LoadedTrace> TraceLoadingJob::take_preview() {
  std::lock_guard<std::mutex> lock(preview_mutex_);
  return std::move(preview_);
}

void TraceLoadingJob::prepare(LoadedTrace& trace) {
  trace.timeline = build_timeline_index(trace.model);
  trace.steps = analysis::known_steps(trace.model);
}

// Whatever the files hold, the loading thread ends with a result: an exception here would
// terminate the viewer (std::terminate), so it becomes the trace's read error instead.
void TraceLoadingJob::run() try {
  auto started = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  analysis::LoadOptions options;
  options.cancel = &cancel_;
  options.progress = [this](const analysis::LoadProgress& progress) {
    double fraction =
        progress.bytes_total > 0
            ? static_cast<double>(progress.bytes_done) / progress.bytes_total
            : static_cast<double>(progress.files_done) / std::max<size_t>(progress.files_total, 1);
    progress_.store(static_cast<float>(0.9 * fraction), std::memory_order_relaxed);
  };
  // First look: the beginning of every file (Kineto JSON is read whole, so it gets none).
  const bool any_json = std::any_of(files_.begin(), files_.end(), analysis::is_chrome_json_path);
  if (preview_events_ > 0 && !any_json && !files_.empty()) {
    stage_.store("reading the beginning");
    analysis::LoadOptions first_look = options;
    first_look.progress = nullptr;
    first_look.max_events_per_file = std::max<uint64_t>(preview_events_ / files_.size(), 1);
    auto trace = std::make_unique<LoadedTrace>();
    trace->files = files_;
    trace->model = analysis::load_traces(files_, first_look);
    const bool partial =
        std::any_of(trace->model.processes.begin(), trace->model.processes.end(),
                    [](const analysis::ProcessTrack& process) { return process.truncated; });
    stage_.store("indexing");
    prepare(*trace);
    trace->load_seconds = seconds();
    if (!partial || cancel_.load()) {  // that was the whole trace
      result_ = std::move(trace);
      progress_.store(1.0f);
      done_.store(true, std::memory_order_release);
      return;
    }
    trace->preview = true;
    {
      std::lock_guard<std::mutex> lock(preview_mutex_);
      preview_ = std::move(trace);
    }
  }
  stage_.store("reading");
  auto trace = std::make_unique<LoadedTrace>();
  trace->files = files_;
  trace->model = analysis::load_traces(files_, options);
  stage_.store("indexing");
  progress_.store(0.9f);
  prepare(*trace);
  trace->load_seconds = seconds();
  result_ = std::move(trace);
  progress_.store(1.0f);
  done_.store(true, std::memory_order_release);
} catch (const std::exception& failure) {
  auto trace = std::make_unique<LoadedTrace>();
  trace->files = files_;
  trace->model.errors.push_back({files_.empty() ? std::string() : files_.front(), 0,
                                 std::string("loading failed: ") + failure.what()});
  result_ = std::move(trace);
  progress_.store(1.0f);
  done_.store(true, std::memory_order_release);
}

TraceTablesJob::TraceTablesJob(const LoadedTrace& trace) {
  thread_ = std::thread([this, &trace] {
    try {
      tables_.kernel_stats = kernel_statistics(trace.model);
      tables_.range_stats = range_statistics(trace.model);
      analysis::Report report = analysis::build_report(trace.model);
      tables_.summary = summarize_run(report);
      tables_.op_waits = analysis::collective_op_waits(trace.model);
      tables_.waits_at_end = waits_at_end(trace.model);
      const analysis::WhatHappened what = analysis::explain_dump(trace.model);
      tables_.what_happened_headline = analysis::what_happened_headline(what);
      tables_.what_happened_text =
          analysis::render_what_happened(what, analysis::ReportFormat::kText);
      tables_.findings = std::move(report.findings);
    } catch (const std::exception&) {
      tables_ = TraceTables{};  // the panels show empty tables; the trace itself is shown
    }
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
  trace.summary = std::move(tables_.summary);
  trace.op_waits = std::move(tables_.op_waits);
  trace.waits_at_end = std::move(tables_.waits_at_end);
  trace.what_happened_headline = std::move(tables_.what_happened_headline);
  trace.what_happened_text = std::move(tables_.what_happened_text);
  trace.tables_ready = true;
}

}  // namespace moescope::viewer
