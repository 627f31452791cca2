// A trace as the viewer holds it: the model, the timeline index and the tables computed once
// after loading. Built on the loading thread, then handed to the UI thread whole.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moescope/analysis/collective_op_wait.h"
#include "moescope/analysis/findings.h"
#include "moescope/analysis/trace_model.h"
#include "moescope/viewer/panel_data.h"
#include "moescope/viewer/run_summary.h"
#include "moescope/viewer/timeline_index.h"
#include "moescope/viewer/waits_at_end.h"

namespace moescope::viewer {

struct LoadedTrace {
  std::vector<std::string> files;
  // Only the beginning of each file (TraceLoadingJob's first look at a large trace); the
  // whole trace replaces it when loaded.
  bool preview = false;
  analysis::TraceModel model;
  TimelineIndex timeline;
  std::vector<int64_t> steps;  // known step numbers, ascending
  // Filled by TraceTablesJob after the trace is on screen (findings on 10 M events take
  // seconds); tables_ready says when.
  bool tables_ready = false;
  std::vector<NameStatistics> kernel_stats, range_stats;
  std::vector<analysis::Finding> findings;  // the report's, ranked
  RunSummary summary;                       // the first screen's (run_summary.h)
  analysis::CollectiveOpWaits op_waits;     // each collective's wait, shaded on the timeline
  std::vector<WaitAtEnd> waits_at_end;      // where a hung job's ranks wait as the trace ends
  // `moescope report`'s "What happened" (what_happened.h) of a flight-recorder dump or a hung
  // job's traces: its one-line headline and its text; both "" otherwise.
  std::string what_happened_headline, what_happened_text;
  double load_seconds = 0.0;
};

struct TraceTables {
  std::vector<NameStatistics> kernel_stats, range_stats;
  std::vector<analysis::Finding> findings;  // the report's, ranked
  RunSummary summary;
  analysis::CollectiveOpWaits op_waits;
  std::vector<WaitAtEnd> waits_at_end;
  std::string what_happened_headline, what_happened_text;
};

// Computes the statistics tables and the findings of a shown trace on a background thread.
// The trace must outlive the job (the destructor waits for the thread).
class TraceTablesJob {
 public:
  explicit TraceTablesJob(const LoadedTrace& trace);
  ~TraceTablesJob();
  TraceTablesJob(const TraceTablesJob&) = delete;
  TraceTablesJob& operator=(const TraceTablesJob&) = delete;
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Moves the tables into `trace` once done().
  void move_into(LoadedTrace& trace);

 private:
  TraceTables tables_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Loads traces on a background thread; the UI polls progress() and take_result(). A trace of
// more than `preview_events` events is first read only up to that many (spread over its files)
// and offered as a preview (take_preview()) so the window shows data at once while the whole
// trace loads; smaller traces are read once. 0 = no preview.
class TraceLoadingJob {
 public:
  static constexpr uint64_t kPreviewEvents = 1'000'000;
  explicit TraceLoadingJob(std::vector<std::string> files,
                           uint64_t preview_events = kPreviewEvents);
  ~TraceLoadingJob();
  TraceLoadingJob(const TraceLoadingJob&) = delete;
  TraceLoadingJob& operator=(const TraceLoadingJob&) = delete;

  // 0..1 (file bytes read; the last few percent are index building).
  float progress() const { return progress_.load(std::memory_order_relaxed); }
  const char* stage() const { return stage_.load(std::memory_order_relaxed); }
  bool done() const { return done_.load(std::memory_order_acquire); }
  // The loaded trace once done() (then null on later calls).
  std::unique_ptr<LoadedTrace> take_result();
  // The preview (LoadedTrace::preview) once it is ready (also after done(), until taken); null
  // when there is none and on later calls.
  std::unique_ptr<LoadedTrace> take_preview();
  const std::vector<std::string>& files() const { return files_; }

 private:
  void run();
  // Index and tables a freshly loaded model needs before it is shown.
  static void prepare(LoadedTrace& trace);

  std::vector<std::string> files_;
  uint64_t preview_events_ = 0;
  std::mutex preview_mutex_;
  std::unique_ptr<LoadedTrace> preview_;
  std::atomic<float> progress_{0.0f};
  std::atomic<const char*> stage_{"reading"};
  std::atomic<bool> done_{false};
  std::atomic<bool> cancel_{false};
  std::unique_ptr<LoadedTrace> result_;
  std::thread thread_;
};

}  // namespace moescope::viewer
