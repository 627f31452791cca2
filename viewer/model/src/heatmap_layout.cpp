#include "moescope/viewer/heatmap_layout.h"

#include <algorithm>
#include <cmath>

namespace moescope::viewer {

Rgb heat_colour(double value) {
  // Control points of the scale; linear interpolation between them.
  static constexpr double kStops[][3] = {{0, 0, 4},      {40, 11, 84},   {101, 21, 110},
                                         {159, 42, 99},  {212, 72, 66},  {245, 125, 21},
                                         {250, 193, 39}, {252, 255, 164}};
  constexpr int kNumStops = sizeof(kStops) / sizeof(kStops[0]);
  if (!std::isfinite(value)) value = 0.0;
  double position = std::clamp(value, 0.0, 1.0) * (kNumStops - 1);
  int below = std::min(static_cast<int>(position), kNumStops - 2);
  double fraction = position - below;
  auto mix = [&](int channel) {
    double v =
        kStops[below][channel] + (kStops[below + 1][channel] - kStops[below][channel]) * fraction;
    return static_cast<uint8_t>(std::lround(v));
  };
  return {mix(0), mix(1), mix(2)};
}

uint32_t packed_rgba(Rgb colour) {
  return 0xff000000u | (static_cast<uint32_t>(colour.b) << 16) |
         (static_cast<uint32_t>(colour.g) << 8) | colour.r;
}

bool GridLayout::cell_at(float x, float y, int& row, int& column) const {
  if (cell_width <= 0.0f || cell_height <= 0.0f) return false;
  float fx = (x - left) / cell_width;
  float fy = (y - top) / cell_height;
  if (fx < 0.0f || fy < 0.0f) return false;
  column = static_cast<int>(fx);
  row = static_cast<int>(fy);
  return column < columns && row < rows;
}

GridLayout layout_grid(float x, float y, float width, float height, int rows, int columns,
                       float label_width, float label_height, float max_cell) {
  GridLayout grid;
  grid.rows = std::max(rows, 0);
  grid.columns = std::max(columns, 0);
  grid.left = std::floor(x + label_width);
  grid.top = std::floor(y + label_height);
  if (grid.rows == 0 || grid.columns == 0) return grid;
  float available_width = std::max(width - label_width, 0.0f);
  float available_height = std::max(height - label_height, 0.0f);
  grid.cell_width =
      std::min(std::floor(available_width / static_cast<float>(grid.columns)), max_cell);
  grid.cell_height =
      std::min(std::floor(available_height / static_cast<float>(grid.rows)), max_cell);
  grid.cell_width = std::max(grid.cell_width, 1.0f);
  grid.cell_height = std::max(grid.cell_height, 1.0f);
  return grid;
}

}  // namespace moescope::viewer
