// The panels' names (command line, tabs).
#include <cstddef>
#include <string>

#include "viewer_state.h"

namespace moescope::viewer {

namespace {
constexpr int kNumPanels = static_cast<int>(Panel::kCount);

// `panel`'s entry of a list of words with one per panel in Panel order ("?" out of range).
template <size_t N>
const char* word_of(const char* const (&words)[N], Panel panel) {
  // One word per value: a value added without its word stops the build.
  static_assert(N == static_cast<size_t>(kNumPanels));
  const int index = static_cast<int>(panel);
  return index >= 0 && index < kNumPanels ? words[index] : "?";
}
}  // namespace

// Each panel's name and title: one array per word, in Panel order.
const char* panel_name(Panel panel) {
  static const char* const kNames[] = {"overview", "timeline", "experts", "comm",
                                       "memory",   "report",   "stats",   "compare"};
  return word_of(kNames, panel);
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
  return word_of(kTitles, panel);
}

}  // namespace moescope::viewer
