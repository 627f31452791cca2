// Reads and writes one element of a float32 or bf16 host buffer as float (CPU references).
#pragma once

#include <cstdint>

#include "moescope/kernels/types.h"

namespace moescope::kernels::detail {

inline float load_element(const void* base, DType dtype, std::int64_t index) {
  if (dtype == DType::kFloat32) return static_cast<const float*>(base)[index];
  return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
}

inline void store_element(void* base, DType dtype, std::int64_t index, float value) {
  if (dtype == DType::kFloat32) {
    static_cast<float*>(base)[index] = value;
  } else {
    static_cast<std::uint16_t*>(base)[index] = float_to_bf16(value);
  }
}

}  // namespace moescope::kernels::detail
