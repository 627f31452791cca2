// A PNG the viewer wrote in screenshot mode, read back for the tests that look at its pixels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/viewer/heatmap_layout.h"

namespace moescope::viewer::testing {

struct PngImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes a pixel
  // The pixel at (x, y), clamped to the image.
  Rgb at(float x, float y) const;
};

// False (and `image` empty) when the file cannot be read as an image.
bool read_png(const std::string& path, PngImage& image);

// Perceived brightness (ITU-R 601 luma) of a colour, 0-255.
double brightness(Rgb colour);

}  // namespace moescope::viewer::testing
