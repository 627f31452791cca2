// The timeline: ranks -> CPU threads (nested spans), CUDA streams, communicators, counter plots;
// pan/zoom/box-zoom, W/A/S/D, folding, tooltips, selection with details, flow arrows, search,
// a step ruler and collapsible tracks. Draws from LoadedTrace only.
#pragma once

#include <string>
#include <vector>

#include <imgui.h>

#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/time_axis.h"
#include "moescope/viewer/timeline_index.h"
#include "moescope/viewer/track_layout.h"
#include "viewer_state.h"

namespace moescope::viewer {

class TimelinePanel {
 public:
  // Shows the whole trace.
  void reset(const LoadedTrace& trace);
  // The trace grew (its whole load replaced a preview): the view stays where it is and may
  // now move over all of `trace`; search results and flows (indices into the old trace) go.
  void extend_to(const LoadedTrace& trace);
  void draw(LoadedTrace& trace, ViewerState& state);
  // Searches like the search box + Enter: selects the first match and brings it into view.
  void search(LoadedTrace& trace, ViewerState& state, const std::string& text);

  // Pixels of fold width; spans narrower than this are folded.
  static constexpr double kFoldPx = 3.0;
  static constexpr float kLabelWidth = 230.0f;

 private:
  void draw_toolbar(LoadedTrace& trace, ViewerState& state);
  void draw_ruler(const LoadedTrace& trace, ViewerState& state, ImVec2 origin, float width);
  void draw_tracks(LoadedTrace& trace, ViewerState& state, float height);
  void draw_details(const LoadedTrace& trace, const ViewerState& state);
  void handle_keys(float area_x, float width);
  void select_and_show(const LoadedTrace& trace, ViewerState& state, const EventRef& ref);
  void update_selected_flows(const LoadedTrace& trace, const ViewerState& state);
  void draw_wait_at_end(ImDrawList* draw, const LoadedTrace& trace, const WaitAtEnd& wait,
                        float area_x, float content_top);

  TimeAxis axis_;
  TrackMetrics metrics_;
  TimelineFrame frame_;
  std::vector<TrackRows> rows_;
  std::vector<TrackShape> shapes_;
  // Mouse gestures on the track area.
  bool panning_ = false;
  bool box_zooming_ = false;
  ImVec2 press_position_{0, 0};
  float pending_scroll_y_ = -1.0f;
  // Search by name.
  char search_text_[128] = {};
  std::string searched_;
  std::vector<EventRef> matches_;
  int match_index_ = -1;
  // Flows of the selected event, recomputed when the selection changes.
  EventRef flows_for_;
  std::vector<analysis::FlowArrow> selected_arrows_;
};

}  // namespace moescope::viewer
