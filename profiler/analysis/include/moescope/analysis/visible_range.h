// Queries over the model's start-sorted tracks (trace_model.h): what is visible in [t0, t1),
// found with binary searches.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct IndexRange {
  size_t begin = 0, end = 0;  // half-open
  size_t size() const { return end - begin; }
  bool empty() const { return begin >= end; }
};

// Items of a start-sorted array overlapping [t0, t1), given max_end (running max of ends).
// The result may include items that end before t0 when a longer item precedes them.
template <typename Item>
IndexRange visible_range(const std::vector<Item>& items, const std::vector<TimeNs>& max_end,
                         TimeNs t0, TimeNs t1) {
  IndexRange range;
  range.begin =
      static_cast<size_t>(std::upper_bound(max_end.begin(), max_end.end(), t0) - max_end.begin());
  range.end = static_cast<size_t>(
      std::lower_bound(items.begin(), items.end(), t1,
                       [](const Item& item, TimeNs time) { return item.start < time; }) -
      items.begin());
  if (range.end < range.begin) range.end = range.begin;
  return range;
}
inline IndexRange visible_range(const GpuStreamTrack& track, TimeNs t0, TimeNs t1) {
  return visible_range(track.ops, track.max_end, t0, t1);
}
inline IndexRange visible_range(const CommunicatorTrack& track, TimeNs t0, TimeNs t1) {
  return visible_range(track.ops, track.max_end, t0, t1);
}
// Positions in track.spans_by_depth[depth] of the spans overlapping [t0, t1) (exact).
inline IndexRange visible_spans(const CpuThreadTrack& track, size_t depth, TimeNs t0, TimeNs t1) {
  IndexRange range;
  if (depth >= track.spans_by_depth.size()) return range;
  const auto& indices = track.spans_by_depth[depth];
  const auto& spans = track.spans;
  range.begin = static_cast<size_t>(
      std::upper_bound(indices.begin(), indices.end(), t0,
                       [&](TimeNs time, uint32_t i) { return time < spans[i].end; }) -
      indices.begin());
  range.end = static_cast<size_t>(
      std::lower_bound(indices.begin(), indices.end(), t1,
                       [&](uint32_t i, TimeNs time) { return spans[i].start < time; }) -
      indices.begin());
  if (range.end < range.begin) range.end = range.begin;
  return range;
}
// Samples of a counter in [t0, t1), plus the one before t0 (the value in force at t0).
inline IndexRange visible_samples(const std::vector<TimeNs>& times, TimeNs t0, TimeNs t1) {
  IndexRange range;
  size_t first =
      static_cast<size_t>(std::lower_bound(times.begin(), times.end(), t0) - times.begin());
  range.begin = first > 0 ? first - 1 : 0;
  range.end = static_cast<size_t>(std::lower_bound(times.begin(), times.end(), t1) - times.begin());
  if (range.end < range.begin) range.end = range.begin;
  return range;
}

}  // namespace moescope::analysis
