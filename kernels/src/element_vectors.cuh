// Device-side element access for float32 and bf16 (stored as uint16_t bits), one element or
// one 16-byte vector (4 floats / 8 bf16) at a time, always converting to float for arithmetic.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace moescope::kernels::detail {

struct Float32Elements {
  using Storage = float;
  static constexpr int kPerVector = 4;
  __device__ static float to_float(Storage value) { return value; }
  __device__ static Storage from_float(float value) { return value; }
  __device__ static void unpack(const uint4& vector, float (&values)[kPerVector]) {
    values[0] = __uint_as_float(vector.x);
    values[1] = __uint_as_float(vector.y);
    values[2] = __uint_as_float(vector.z);
    values[3] = __uint_as_float(vector.w);
  }
  __device__ static uint4 pack(const float (&values)[kPerVector]) {
    return make_uint4(__float_as_uint(values[0]), __float_as_uint(values[1]),
                      __float_as_uint(values[2]), __float_as_uint(values[3]));
  }
};

struct BFloat16Elements {
  using Storage = std::uint16_t;
  static constexpr int kPerVector = 8;
  __device__ static float to_float(Storage value) {
    return __uint_as_float(static_cast<unsigned int>(value) << 16);
  }
  __device__ static Storage from_float(float value) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
  }
  __device__ static void unpack(const uint4& vector, float (&values)[kPerVector]) {
    const unsigned int words[4] = {vector.x, vector.y, vector.z, vector.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little endian: the low half is the earlier element
      values[2 * i] = __uint_as_float(words[i] << 16);
      values[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
  __device__ static uint4 pack(const float (&values)[kPerVector]) {
    unsigned int words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      words[i] = static_cast<unsigned int>(from_float(values[2 * i])) |
                 (static_cast<unsigned int>(from_float(values[2 * i + 1])) << 16);
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
  }
};

/// True when rows of `hidden` elements of `element_bytes` can move as 16-byte vectors.
inline bool rows_are_vectorizable(long long hidden, int element_bytes, const void* first,
                                  const void* second) {
  return (hidden * element_bytes) % 16 == 0 && reinterpret_cast<std::uintptr_t>(first) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(second) % 16 == 0;
}

/// The item a kernel steps along a row by: one 16-byte vector of Elements (kVectorized) or one
/// element; either way kPer floats to compute with, so one kernel body serves both.
template <typename Elements, bool kVectorized>
struct RowItem {
  using Storage = std::conditional_t<kVectorized, uint4, typename Elements::Storage>;
  static constexpr int kPer = kVectorized ? Elements::kPerVector : 1;
  __device__ static void unpack(const Storage& item, float (&values)[kPer]) {
    if constexpr (kVectorized) {
      Elements::unpack(item, values);
    } else {
      values[0] = Elements::to_float(item);
    }
  }
  __device__ static Storage pack(const float (&values)[kPer]) {
    if constexpr (kVectorized) {
      return Elements::pack(values);
    } else {
      return Elements::from_float(values[0]);
    }
  }
};

/// Calls launch(RowItem<Elements, true>{}) when rows of `hidden` elements at both pointers can
/// move as 16-byte vectors, else launch(RowItem<Elements, false>{}).
template <typename Elements, typename Launch>
void launch_by_row_item(long long hidden, const void* first, const void* second, Launch&& launch) {
  if (rows_are_vectorizable(hidden, static_cast<int>(sizeof(typename Elements::Storage)), first,
                            second)) {
    launch(RowItem<Elements, true>{});
  } else {
    launch(RowItem<Elements, false>{});
  }
}

/// Threads per block for a loop over `items_per_row` items: a multiple of 32 in [32, 256].
inline int threads_for_row(long long items_per_row) {
  long long threads = (items_per_row + 31) / 32 * 32;
  if (threads < 32) threads = 32;
  if (threads > 256) threads = 256;
  return static_cast<int>(threads);
}

}  // namespace moescope::kernels::detail
