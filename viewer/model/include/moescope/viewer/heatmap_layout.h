// Geometry and colours of the expert-load heatmap (layers x experts) and of the rank x rank
// communication matrix. The panels draw with it and the screenshot tests compute the pixel of
// a cell with the same functions.
#pragma once

#include <cstdint>

namespace moescope::viewer {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

// Sequential colour scale from dark blue-purple (0) through red to bright yellow (1), in the
// spirit of matplotlib's "inferno": monotonic in brightness so the hottest cell is the
// brightest. `value` is clamped to [0, 1].
Rgb heat_colour(double value);
// Packs to ImGui's IM_COL32 layout (ABGR in memory order RGBA) with full alpha.
uint32_t packed_rgba(Rgb colour);

// A grid of rows x columns cells inside a rectangle, leaving room for labels on the left and top.
struct GridLayout {
  float left = 0.0f, top = 0.0f;  // top-left of the first cell
  float cell_width = 0.0f, cell_height = 0.0f;
  int rows = 0, columns = 0;

  float cell_x(int column) const { return left + cell_width * static_cast<float>(column); }
  float cell_y(int row) const { return top + cell_height * static_cast<float>(row); }
  // Centre of a cell, for tests that sample its colour.
  float centre_x(int column) const { return cell_x(column) + 0.5f * cell_width; }
  float centre_y(int row) const { return cell_y(row) + 0.5f * cell_height; }
  // Cell under the point, or false outside the grid.
  bool cell_at(float x, float y, int& row, int& column) const;
};

// Lays `rows` x `columns` cells into the rectangle (x, y, width, height) after reserving
// `label_width` on the left and `label_height` on top; cells are at most `max_cell` px.
GridLayout layout_grid(float x, float y, float width, float height, int rows, int columns,
                       float label_width, float label_height, float max_cell);

}  // namespace moescope::viewer
