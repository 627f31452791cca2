#include "png_image.h"

#include <algorithm>

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include <stb/stb_image.h>

namespace moescope::viewer::testing {

Rgb PngImage::at(float x, float y) const {
  const int ix = std::clamp(static_cast<int>(x), 0, width - 1);
  const int iy = std::clamp(static_cast<int>(y), 0, height - 1);
  const uint8_t* p = &rgb[(static_cast<size_t>(iy) * width + ix) * 3];
  return {p[0], p[1], p[2]};
}

bool read_png(const std::string& path, PngImage& image) {
  int channels = 0;
  uint8_t* data = stbi_load(path.c_str(), &image.width, &image.height, &channels, 3);
  if (data == nullptr) {
    image = PngImage{};
    return false;
  }
  image.rgb.assign(data, data + static_cast<size_t>(image.width) * image.height * 3);
  stbi_image_free(data);
  return true;
}

double brightness(Rgb colour) {
  return 0.299 * colour.r + 0.587 * colour.g + 0.114 * colour.b;
}

}  // namespace moescope::viewer::testing
