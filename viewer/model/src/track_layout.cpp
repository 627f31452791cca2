#include "moescope/viewer/track_layout.h"

#include <algorithm>

namespace moescope::viewer {

std::vector<TrackRows> layout_tracks(const std::vector<TrackShape>& shapes,
                                     const TrackMetrics& metrics) {
  std::vector<TrackRows> rows;
  rows.reserve(shapes.size());
  float y = 0.0f;
  for (const TrackShape& shape : shapes) {
    TrackRows row;
    row.top = y;
    row.content_top = y + metrics.header_height;
    float content = 0.0f;
    if (!shape.collapsed) {
      content = shape.is_plot
                    ? metrics.plot_height
                    : metrics.lane_height * static_cast<float>(std::max(shape.num_lanes, 1u));
    }
    row.bottom = row.content_top + content;
    rows.push_back(row);
    y = row.bottom + metrics.gap;
  }
  return rows;
}

TrackHit hit_test_tracks(const std::vector<TrackRows>& rows, const std::vector<TrackShape>& shapes,
                         const TrackMetrics& metrics, float y) {
  // Rows are sorted by top: binary search for the last track starting at or above y.
  auto after = std::upper_bound(rows.begin(), rows.end(), y,
                                [](float value, const TrackRows& row) { return value < row.top; });
  if (after == rows.begin()) return {};
  int track = static_cast<int>(after - rows.begin()) - 1;
  const TrackRows& row = rows[static_cast<size_t>(track)];
  if (y >= row.bottom) return {};  // in the gap below the track
  if (y < row.content_top || shapes[static_cast<size_t>(track)].is_plot) return {track, -1};
  int lane = static_cast<int>((y - row.content_top) / metrics.lane_height);
  return {track, lane};
}

float tracks_height(const std::vector<TrackRows>& rows) {
  return rows.empty() ? 0.0f : rows.back().bottom;
}

}  // namespace moescope::viewer
