// The panels' names (command line, tabs).
#include <string>

#include "viewer_state.h"

namespace moescope::viewer {

namespace {
constexpr int kNumPanels = static_cast<int>(Panel::kCount);
}  // namespace

// Each panel's name and title: one array per word, in Panel order.
const char* panel_name(Panel panel) {
  static const char* const kNames[kNumPanels] = {"overview", "timeline", "experts", "comm",
                                                 "memory",   "report",   "stats",   "compare"};
  const int index = static_cast<int>(panel);
  return index >= 0 && index < kNumPanels ? kNames[index] : "?";
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
  static const char* const kTitles[kNumPanels] = {"Job overview",  "Timeline", "Expert load",
                                                  "Communication", "Memory",   "Report",
                                                  "Statistics",    "Compare"};
  const int index = static_cast<int>(panel);
  return index >= 0 && index < kNumPanels ? kTitles[index] : "?";
}

}  // namespace moescope::viewer
