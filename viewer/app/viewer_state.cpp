// The panels' names (command line, tabs).
#include <string>

#include "viewer_state.h"

namespace moescope::viewer {

const char* panel_name(Panel panel) {
  switch (panel) {
    case Panel::kOverview:
      return "overview";
    case Panel::kTimeline:
      return "timeline";
    case Panel::kExperts:
      return "experts";
    case Panel::kComm:
      return "comm";
    case Panel::kMemory:
      return "memory";
    case Panel::kReport:
      return "report";
    case Panel::kStats:
      return "stats";
    case Panel::kCompare:
      return "compare";
    default:
      return "?";
  }
}

bool parse_panel(const char* text, Panel& panel) {
  for (int i = 0; i < static_cast<int>(Panel::kCount); ++i) {
    if (std::string(text) == panel_name(static_cast<Panel>(i))) {
      panel = static_cast<Panel>(i);
      return true;
    }
  }
  return false;
}

const char* panel_title(Panel panel) {
  switch (panel) {
    case Panel::kOverview:
      return "Job overview";
    case Panel::kTimeline:
      return "Timeline";
    case Panel::kExperts:
      return "Expert load";
    case Panel::kComm:
      return "Communication";
    case Panel::kMemory:
      return "Memory";
    case Panel::kReport:
      return "Report";
    case Panel::kStats:
      return "Statistics";
    case Panel::kCompare:
      return "Compare";
    default:
      return "?";
  }
}

}  // namespace moescope::viewer
