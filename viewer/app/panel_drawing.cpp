#include "panel_drawing.h"

#include <cstdio>

namespace moescope::viewer {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

void draw_colour_legend(ImDrawList* draw, ImVec2 top_left, ImVec2 size, double max_value,
                        const char* unit) {
  const int bands = 64;
  for (int i = 0; i < bands; ++i) {
    float y0 = top_left.y + size.y * static_cast<float>(i) / bands;
    float y1 = top_left.y + size.y * static_cast<float>(i + 1) / bands;
    ImU32 colour = packed_rgba(heat_colour(1.0 - (i + 0.5) / bands));
    draw->AddRectFilled(ImVec2(top_left.x, y0), ImVec2(top_left.x + size.x, y1 + 0.5f), colour);
  }
  draw->AddRect(top_left, ImVec2(top_left.x + size.x, top_left.y + size.y),
                IM_COL32(160, 160, 160, 255));
  char label[48];
  for (double fraction : {1.0, 0.5, 0.0}) {
    double value = max_value * fraction;
    std::snprintf(label, sizeof(label), value >= 10.0 ? "%.0f %s" : "%.3g %s", value, unit);
    float y = top_left.y + size.y * static_cast<float>(1.0 - fraction) - 7.0f;
    draw->AddText(ImVec2(top_left.x + size.x + 6, y), IM_COL32(220, 220, 220, 255), label);
  }
}

LayoutProbe& layout_probe() {
  static LayoutProbe probe;
  return probe;
}

}  // namespace moescope::viewer
