// viewer_bench: the timeline's per-frame cost and the time to first frame on a large trace.
//   1. writes a synthetic 2-rank MoE trace with ~N timeline events (spans, kernels, comm ops)
//   2. time to first frame: opens the trace like the viewer (TraceLoadingJob on a background
//      thread): the first (progress) frame, the first frame with data (the preview: the
//      beginning of every file, indexed and drawn) and the whole trace loaded and indexed
//   3. draw-list build of the fully zoomed-out timeline and of one step, against the baseline of
//      walking every span of the visible tracks once (what a viewer without folding and binary
//      search does per frame)
// Usage: viewer_bench [--events N] [--dir DIR] [--keep]  (default 10,000,000 events, /tmp)
#include <time.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/panel_data.h"
#include "moescope/viewer/timeline_index.h"
#include "sample_trace_writer.h"

namespace {

using Clock = std::chrono::steady_clock;
using moescope::viewer::TimeAxis;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU time of every thread of the process (the loader's threads included).
double process_cpu_seconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

double thread_cpu_seconds() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return double(now.tv_sec) + double(now.tv_nsec) * 1e-9;
}

// Median CPU milliseconds of this thread over `repeats` runs of `work` (CPU time, because the
// machines these run on are shared and wall time includes other people's work).
template <typename Work>
double median_ms(int repeats, Work&& work) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    double start = thread_cpu_seconds();
    work();
    times.push_back((thread_cpu_seconds() - start) * 1e3);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t target_events = 10'000'000;
  std::string directory = "/tmp";
  bool keep = false;  // keep the trace (to profile the loader on it)
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--keep")) keep = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--events")) target_events = std::strtoull(argv[++i], nullptr, 10);
    if (!std::strcmp(argv[i], "--dir")) directory = argv[++i];
  }
  namespace fs = std::filesystem;
  directory += "/moescope_viewer_bench";
  fs::create_directories(directory);

  // ~17 timeline events per layer pass with 8 kernels per layer; 16 layers x 2 passes per step.
  moescope::viewer::testing::SampleTraceShape shape;
  shape.num_ranks = 2;
  shape.num_layers = 16;
  shape.kernels_per_layer = 8;
  shape.num_experts = 64;
  shape.step_ns = 20'000'000;
  uint64_t per_step = static_cast<uint64_t>(shape.num_ranks) * shape.num_layers * 2 * 17 + 6;
  shape.num_steps = static_cast<int>(std::max<uint64_t>(target_events / per_step, 1));
  auto write_start = Clock::now();
  auto sample = moescope::viewer::testing::write_sample_trace(directory, shape);
  std::printf("trace: %llu timeline events, %d ranks, %d steps, written in %.1f s\n",
              static_cast<unsigned long long>(sample.timeline_events), shape.num_ranks,
              shape.num_steps, seconds_since(write_start));

  // Opening the trace as the viewer does (TraceLoadingJob on its own thread). The UI's first
  // frame only needs the progress value; the first frame with data comes from the preview (the
  // beginning of every file) while the whole trace loads; then the whole trace.
  auto open_start = Clock::now();
  const double open_cpu_start = process_cpu_seconds();
  moescope::viewer::TraceLoadingJob job(sample.files);
  volatile float first_frame_progress = job.progress();  // what the first frame draws
  (void)first_frame_progress;
  double first_frame_s = seconds_since(open_start);
  // Poll like the UI loop (a frame every few ms) until data can be drawn.
  std::unique_ptr<moescope::viewer::LoadedTrace> shown;
  while (!shown) {
    shown = job.take_preview();
    if (!shown && job.done()) shown = job.take_result();
    if (!shown) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto first_frame_of = [](const moescope::viewer::LoadedTrace& trace) {
    TimeAxis view(double(trace.timeline.begin_ns), double(trace.timeline.end_ns), 1600.0);
    auto track_rows = moescope::viewer::layout_tracks(trace.timeline.shapes(), {});
    moescope::viewer::TimelineFrame drawn;
    moescope::viewer::build_timeline_frame(trace.model, trace.timeline, track_rows, 0.0f,
                                           moescope::viewer::tracks_height(track_rows) + 1.0f, view,
                                           3.0, drawn);
    return drawn.items.size();
  };
  size_t first_data_items = first_frame_of(*shown);
  const double first_data_frame_s = seconds_since(open_start);
  const double first_data_frame_cpu_s = process_cpu_seconds() - open_cpu_start;
  const bool first_is_preview = shown->preview;
  const uint64_t first_events = shown->model.total_events;
  double first_end_ms = double(shown->model.end - shown->model.begin) * 1e-6;
  while (!job.done()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  if (first_is_preview) shown = job.take_result();
  const double loaded_s = seconds_since(open_start);
  const double loaded_cpu_s = process_cpu_seconds() - open_cpu_start;
  const moescope::analysis::TraceModel& model = shown->model;
  const moescope::viewer::TimelineIndex& index = shown->timeline;

  TimeAxis axis(double(index.begin_ns), double(index.end_ns), 1600.0);
  auto rows = moescope::viewer::layout_tracks(index.shapes(), {});
  float all_tracks = moescope::viewer::tracks_height(rows) + 1.0f;
  moescope::viewer::TimelineFrame frame;

  auto build = [&] {
    moescope::viewer::build_timeline_frame(model, index, rows, 0.0f, all_tracks, axis, 3.0, frame);
  };
  // Baseline: visit every span of every lane once (no folding, no binary search).
  volatile double sink = 0;
  auto walk_all = [&] {
    double sum = 0;
    for (const auto& track : index.tracks) {
      for (const auto& lane : track.lanes) {
        for (size_t i = 0; i < lane.size(); ++i) {
          sum += axis.time_to_x(double(lane.start_ns[i])) + axis.time_to_x(double(lane.end_ns[i]));
        }
      }
    }
    sink = sum;
  };
  double zoomed_out_ms = median_ms(15, build);
  size_t zoomed_out_items = frame.items.size();
  double walk_ms = median_ms(5, walk_all);
  const auto& step = model.processes[0].steps[model.processes[0].steps.size() / 2];
  axis.show_range(double(step.start), double(step.end), 0.0);
  double one_step_ms = median_ms(51, build);
  size_t one_step_items = frame.items.size();

  // The timeline index alone (built again here; its lanes are built on all hardware threads,
  // so CPU time of the whole process, nothing else running).
  const double index_cpu_start = process_cpu_seconds();
  auto index_start = Clock::now();
  const size_t rebuilt_tracks = moescope::viewer::build_timeline_index(model).tracks.size();
  const double index_s = seconds_since(index_start);
  const double index_cpu_s = process_cpu_seconds() - index_cpu_start;
  auto tables_start = Clock::now();
  auto kernel_rows = moescope::viewer::kernel_statistics(model);
  auto range_rows = moescope::viewer::range_statistics(model);
  double statistics_s = seconds_since(tables_start);
  tables_start = Clock::now();
  auto findings = moescope::analysis::build_report(model).findings;
  double findings_s = seconds_since(tables_start);

  std::printf("model: %llu events loaded, %llu timeline spans indexed, %zu tracks\n",
              static_cast<unsigned long long>(model.total_events),
              static_cast<unsigned long long>(index.num_spans), index.tracks.size());
  std::printf("| measure | value | target |\n|---|---|---|\n");
  std::printf("| first frame (progress bar, load on its thread) | %.3f ms | <= 2 s |\n",
              first_frame_s * 1e3);
  std::printf(
      "| first frame with data (%s: %.2f M events, the first %.0f ms of the trace; %zu drawn "
      "items), wall | %.2f s | <= 2 s |\n",
      first_is_preview ? "preview" : "whole trace", double(first_events) / 1e6, first_end_ms,
      first_data_items, first_data_frame_s);
  std::printf("| the same, CPU time of all threads | %.2f s | |\n", first_data_frame_cpu_s);
  std::printf("| whole trace loaded and indexed (in the background), wall | %.2f s | |\n",
              loaded_s);
  std::printf("| the same, CPU time of all threads (preview included) | %.2f s | |\n",
              loaded_cpu_s);
  std::printf("| of which the timeline index (%zu tracks), wall / CPU | %.2f s / %.2f s | |\n",
              rebuilt_tracks, index_s, index_cpu_s);
  std::printf(
      "| statistics tables (%zu + %zu names), computed after the first data frame | %.2f s | |\n",
      kernel_rows.size(), range_rows.size(), statistics_s);
  std::printf("| findings (%zu), computed after the first data frame | %.2f s | |\n",
              findings.size(), findings_s);
  std::printf("| draw list, fully zoomed out (%zu items) | %.3f ms | <= 10 ms |\n",
              zoomed_out_items, zoomed_out_ms);
  std::printf("| draw list, one step (%zu items) | %.3f ms | <= 2 ms |\n", one_step_items,
              one_step_ms);
  std::printf("| baseline: walk every span once | %.2f ms | |\n", walk_ms);
  std::printf("| zoomed-out / baseline | %.4f | |\n", zoomed_out_ms / walk_ms);
  if (!keep) fs::remove_all(directory);
  bool ok = first_frame_s <= 2.0 && first_data_frame_s <= 2.0 && zoomed_out_ms <= 10.0 &&
            one_step_ms <= 2.0;
  std::printf("%s\n", ok ? "targets met" : "TARGETS MISSED");
  return ok ? 0 : 1;
}
