// Fixed-width integers read and written at any byte of a chunk (its records are packed, so a
// field need not be aligned): memcpy, which compilers turn into one load or store. Shared by
// delta coding and column coding.
#pragma once

#include <cstdint>
#include <cstring>

namespace moescope::trace {

inline uint32_t load_u32(const uint8_t* at) {
  uint32_t value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}
inline uint64_t load_u64(const uint8_t* at) {
  uint64_t value;
  std::memcpy(&value, at, sizeof(value));
  return value;
}
inline void store_u32(uint8_t* at, uint32_t value) {
  std::memcpy(at, &value, sizeof(value));
}
inline void store_u64(uint8_t* at, uint64_t value) {
  std::memcpy(at, &value, sizeof(value));
}

}  // namespace moescope::trace
