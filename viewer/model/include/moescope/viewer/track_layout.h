// Vertical layout of the timeline: tracks (a CPU thread, a CUDA stream, a communicator, a
// counter plot) stacked under a header row each, collapsible. Plain maths, no ImGui.
#pragma once

#include <cstdint>
#include <vector>

namespace moescope::viewer {

struct TrackShape {
  uint32_t num_lanes = 1;  // span lanes (nesting depths / overlapping GPU ops)
  bool is_plot = false;    // a counter: one plot row instead of lanes
  bool collapsed = false;  // header only
};

struct TrackMetrics {
  float header_height = 18.0f;
  float lane_height = 18.0f;
  float plot_height = 48.0f;
  float gap = 4.0f;  // between tracks
};

// Where one track lies, in pixels from the top of the (scrolled) track area.
struct TrackRows {
  float top = 0.0f;          // header starts here
  float content_top = 0.0f;  // first lane / the plot
  float bottom = 0.0f;       // end of the last lane (exclusive)
};

std::vector<TrackRows> layout_tracks(const std::vector<TrackShape>& shapes,
                                     const TrackMetrics& metrics);

// What lies at height y: the track, and the lane within it (-1 = the header or a plot).
struct TrackHit {
  int track = -1;
  int lane = -1;
};
TrackHit hit_test_tracks(const std::vector<TrackRows>& rows, const std::vector<TrackShape>& shapes,
                         const TrackMetrics& metrics, float y);

// Total height of the laid-out tracks.
float tracks_height(const std::vector<TrackRows>& rows);

}  // namespace moescope::viewer
