// The panels' names (command line, tabs).
#include <iterator>
#include <string>

#include "viewer_state.h"

namespace moescope::viewer {

namespace {
constexpr int kNumPanels = static_cast<int>(Panel::kCount);
}  // namespace

// Each panel's name and title: one array per word, in Panel order.
const char* panel_name(Panel panel) {
  static const char* const kNames[] = {"overview", "timeline", "experts", "comm",
                                       "memory",   "report",   "stats",   "compare"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumPanels);
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
  static const char* const kTitles[] = {"Job overview", "Timeline", "Expert load", "Communication",
                                        "Memory",       "Report",   "Statistics",  "Compare"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kTitles) == kNumPanels);
  const int index = static_cast<int>(panel);
  return index >= 0 && index < kNumPanels ? kTitles[index] : "?";
}

}  // namespace moescope::viewer
