// One horizontal lane of a timeline track (one nesting depth of a thread, one CUDA stream...):
// spans that do not overlap, sorted by start, so their ends are sorted too. That lets each frame
// find the visible spans and fold runs of tiny spans with binary searches instead of walking
// every event (the approach Tracy takes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moescope/viewer/time_axis.h"

namespace moescope::viewer {

// Struct-of-arrays storage of a lane; `event` maps a lane slot back to the trace model's event.
struct Lane {
  std::vector<int64_t> start_ns;
  std::vector<int64_t> end_ns;
  std::vector<uint32_t> event;

  // Fold index: the maximum over blocks of 64 and of 4096 slots of fold_key(slot) (a span's
  // width or the gap before it, whichever is larger), so a fold finds where it ends by
  // skipping whole blocks. Built by build_fold_index() once the lane is filled; lanes without
  // it fold by binary searches instead.
  std::vector<float> fold_key_max_64;
  std::vector<float> fold_key_max_4096;

  size_t size() const { return start_ns.size(); }
  double fold_key(size_t slot) const {
    double width = static_cast<double>(end_ns[slot] - start_ns[slot]);
    double gap = slot > 0 ? static_cast<double>(start_ns[slot] - end_ns[slot - 1]) : 0.0;
    return width > gap ? width : gap;
  }
  void build_fold_index();
  void push(int64_t start, int64_t end, uint32_t event_index) {
    start_ns.push_back(start);
    end_ns.push_back(end);
    event.push_back(event_index);
  }
};

// Index range [first, last) of the spans of `lane` that intersect [view_start_ns, view_end_ns).
struct SlotRange {
  size_t first = 0;
  size_t last = 0;
};
SlotRange visible_slots(const Lane& lane, double view_start_ns, double view_end_ns);

// One thing to draw: a single span (count == 1) or `count` consecutive spans folded into one
// bar because each is narrower than the fold width. x in pixels relative to the axis origin.
struct LaneDrawItem {
  float x0 = 0.0f;
  float x1 = 0.0f;
  uint32_t first_slot = 0;
  uint32_t count = 0;
  bool folded() const { return count > 1; }
};

// Appends the draw items of `lane` for `axis` to `out`. Spans narrower than `fold_px` and
// separated by gaps narrower than `fold_px` become one folded item. Cost: O(visible items x
// log(lane size)), independent of how many spans hide inside folds.
void build_lane_draw_items(const Lane& lane, const TimeAxis& axis, double fold_px,
                           std::vector<LaneDrawItem>& out);

// First slot >= `from` whose fold_key is >= threshold_ns (size() when none), using the fold
// index when built.
size_t first_fold_break(const Lane& lane, size_t from, double threshold_ns);

// The slot of the span under `time_ns`, or, when none covers it, of the nearest span within
// `tolerance_ns` (so 1-px spans can be clicked). -1 when there is none.
int64_t hit_test_lane(const Lane& lane, double time_ns, double tolerance_ns);

// Assigns each span (sorted by start) the first lane whose last span has ended: properly nested
// spans get their nesting depth, overlapping unrelated spans (concurrent kernels) get extra lanes.
// Returns the lane index of every span.
std::vector<uint32_t> assign_lanes(std::span<const int64_t> start_ns,
                                   std::span<const int64_t> end_ns);

}  // namespace moescope::viewer
