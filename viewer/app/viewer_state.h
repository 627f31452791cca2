// State shared by the panels: the selected step range and rank, the selected timeline event,
// and navigation requests (a finding asking the timeline to show a place).
#pragma once

#include <cstdint>
#include <optional>

#include "moescope/viewer/finding_focus.h"
#include "moescope/viewer/panel_data.h"
#include "moescope/viewer/timeline_index.h"

namespace moescope::viewer {

// kOverview is shown only for rank summaries (the job overview), first; kCompare only with a
// second run (--against).
enum class Panel : int {
  kOverview = 0,
  kTimeline,
  kExperts,
  kComm,
  kMemory,
  kReport,
  kStats,
  kCompare,
  kCount
};
const char* panel_name(Panel panel);
// "timeline" -> Panel::kTimeline ...; false when unknown.
bool parse_panel(const char* text, Panel& panel);
// The tab's title ("Timeline", "Job overview", ...).
const char* panel_title(Panel panel);

struct ViewerState {
  StepRankFilter filter;  // panels' step range and rank
  EventRef selected;      // timeline selection
  int focus_layer = -1;   // heatmap highlight
  int focus_expert = -1;
  int selected_finding = -1;
  std::optional<TimeFocus> pending_focus;  // consumed by the timeline on its next frame
  std::optional<Panel> switch_to;          // consumed by the tab bar
};

}  // namespace moescope::viewer
