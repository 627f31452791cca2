// Writes what screenshot mode captured: the PNG (from OpenGL's bottom-up rows) and a JSON file
// with the geometry the panels used, so tests locate cells with the same layout numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "panel_drawing.h"

namespace moescope::viewer {

// `rgba_bottom_up`: width x height RGBA pixels, first row = bottom of the image.
bool write_png_bottom_up(const std::string& path, int width, int height,
                         const std::vector<uint8_t>& rgba_bottom_up, std::string& error);
bool write_layout_probe(const std::string& path, const LayoutProbe& probe, std::string& error);

}  // namespace moescope::viewer
