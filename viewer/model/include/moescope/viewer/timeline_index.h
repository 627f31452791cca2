// The timeline's view of a TraceModel: one entry per drawn track (rank -> CPU threads, CUDA
// streams, communicators, counters) with its spans split into non-overlapping lanes, and the
// per-frame draw list built from it. Built once after loading; each frame only binary-searches.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"
#include "moescope/viewer/lane_layout.h"
#include "moescope/viewer/time_axis.h"
#include "moescope/viewer/track_layout.h"

namespace moescope::viewer {

enum class TimelineTrackKind : uint8_t { kThread, kGpuStream, kCommunicator, kCounter, kMemory };

struct TimelineTrack {
  TimelineTrackKind kind = TimelineTrackKind::kThread;
  uint32_t process = 0;  // index in TraceModel::processes
  uint32_t track = 0;    // index in that process's threads / gpu_streams / communicators / counters
  std::string label;     // "rank 0 · thread main (1234)"
  std::vector<Lane> lanes;  // Lane::event = index in the track's spans / ops
  // Header only. Counters whose value never changes start collapsed: they tell nothing over
  // time, and a run's memory counters that stay at 0 would otherwise fill the first screen.
  bool collapsed = false;
};

struct TimelineIndex {
  std::vector<TimelineTrack> tracks;
  int64_t begin_ns = 0, end_ns = 0;
  // The training steps (first start, last end over the ranks): the range the timeline opens
  // on, so imports and setup before the first step stay off the first screen. Both 0 without
  // steps (then it opens on the whole trace).
  int64_t steps_begin_ns = 0, steps_end_ns = 0;
  // A hung job (ranks whose traces end inside a collective): the latest end of their
  // recordings, which their waits are drawn to; 0 otherwise. The first screen reaches past the
  // steps toward it, so that the wait is in view.
  int64_t waits_end_ns = 0;
  uint64_t num_spans = 0;  // lane entries in all tracks

  // Timeline track of a model track reference, or -1.
  int find_track(const analysis::TrackRef& ref) const;
  std::vector<TrackShape> shapes() const;
};

TimelineIndex build_timeline_index(const analysis::TraceModel& model);

// One frame's draw list: for each visible (track, lane), a run of items in `items`.
struct LaneRun {
  uint32_t track = 0;
  uint32_t lane = 0;
  uint32_t first_item = 0;
  uint32_t num_items = 0;
};
// A counter plot column: the value in force at the column's time.
struct PlotPoint {
  float x = 0.0f;
  double value = 0.0;
  uint32_t sample = 0;  // index of that value in the track's series
};

// The memory track's stack at `sample` of `usage`: where each category's band ends, stacking the
// categories in their order (moescope_memory_category) from 0; bytes. The last is the sum of
// the categories (the total in use).
std::array<double, analysis::kNumMemoryCategories> memory_stack_tops(
    const analysis::MemoryUsage& usage, size_t sample);
struct PlotRun {
  uint32_t track = 0;
  uint32_t first_point = 0;
  uint32_t num_points = 0;
  double max_value = 0.0;
};
struct TimelineFrame {
  std::vector<LaneRun> lane_runs;
  std::vector<LaneDrawItem> items;
  std::vector<PlotRun> plot_runs;
  std::vector<PlotPoint> points;
  void clear() {
    lane_runs.clear();
    items.clear();
    plot_runs.clear();
    points.clear();
  }
};

// Builds the draw list of every track whose rows intersect [view_top, view_bottom) (pixels of
// the track area; pass the whole height for everything). Spans narrower than `fold_px` fold.
void build_timeline_frame(const analysis::TraceModel& model, const TimelineIndex& index,
                          const std::vector<TrackRows>& rows, float view_top, float view_bottom,
                          const TimeAxis& axis, double fold_px, TimelineFrame& frame);

// Start/end/name of the span or op behind a lane slot, whatever the track kind.
struct EventRef {
  int track = -1;
  int lane = -1;
  int64_t slot = -1;
  bool valid() const { return track >= 0 && lane >= 0 && slot >= 0; }
  bool operator==(const EventRef&) const = default;
};
struct EventSummary {
  int64_t start_ns = 0, end_ns = 0;
  analysis::StringId name = 0;
};
EventSummary summarize_event(const analysis::TraceModel& model, const TimelineIndex& index,
                             const EventRef& ref);

// Arrows to draw for a selected event: launch -> GPU work links (from the model's correlation
// of API calls and GPU ops) and explicit flows. A selected GPU op shows the call that launched
// it; a selected CPU span shows every launch made inside it; at most `max_arrows`.
std::vector<analysis::FlowArrow> arrows_of_event(const analysis::TraceModel& model,
                                                 const TimelineIndex& index, const EventRef& ref,
                                                 size_t max_arrows);

// The search box's next (or previous) match after `current` (-1 = none yet) among `count`,
// wrapping around; -1 when there is no match.
int step_match(int current, size_t count, bool previous);

// Every span/op whose name contains `query` (case-insensitive), sorted by start time.
std::vector<EventRef> search_events(const analysis::TraceModel& model, const TimelineIndex& index,
                                    const std::string& query);

}  // namespace moescope::viewer
