// The layout the viewer writes beside a screenshot (OUT.png.layout.json), read back for the tests
// that find a panel's cells in its pixels.
#pragma once

#include <nlohmann/json.hpp>

#include "moescope/viewer/heatmap_layout.h"

namespace moescope::viewer::testing {

// A heatmap's grid as the layout file gives it ({left, top, cell_width, cell_height, rows,
// columns}).
inline GridLayout grid_from(const nlohmann::json& json) {
  GridLayout grid;
  grid.left = json["left"];
  grid.top = json["top"];
  grid.cell_width = json["cell_width"];
  grid.cell_height = json["cell_height"];
  grid.rows = json["rows"];
  grid.columns = json["columns"];
  return grid;
}

}  // namespace moescope::viewer::testing
