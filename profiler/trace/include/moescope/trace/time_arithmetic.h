// Overflow-safe arithmetic on nanosecond times (int64), used by the readers, the analyses and
// the exporters. Times come from files anyone can write: a Kineto `ts` of 1e300 or a record
// time of INT64_MIN must not become undefined behaviour (signed overflow, a double that does
// not fit an int64) anywhere downstream.
//
// Two tools:
//  - saturating operations, for arithmetic on times that are already in the model (the result
//    sticks at INT64_MIN / INT64_MAX instead of wrapping);
//  - checked conversions, for the readers: a value that is not a finite number inside
//    kMaxPlausibleTimeNs is reported as such, so the record can be skipped and counted.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace moescope::trace {

// A reader accepts a time when |time| < 2^62 ns (about 146 years). Any two accepted times have a
// difference and a sum that fit an int64, so analyses may subtract them freely. (Sums of many
// durations do not: analyses add them with saturating_add.)
inline constexpr int64_t kMaxPlausibleTimeNs = int64_t{1} << 62;

inline bool plausible_time(int64_t ns) {
  return ns > -kMaxPlausibleTimeNs && ns < kMaxPlausibleTimeNs;
}

// a + b, stuck at the int64 limits on overflow.
inline int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return sum;
}

// a - b, stuck at the int64 limits on overflow.
inline int64_t saturating_sub(int64_t a, int64_t b) {
  int64_t difference;
  if (__builtin_sub_overflow(a, b, &difference)) {
    return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return difference;
}

// end - begin, never negative (an end before its begin is a zero-length interval).
inline int64_t saturating_duration(int64_t begin, int64_t end) {
  return end <= begin ? 0 : saturating_sub(end, begin);
}

// |ns| as an unsigned number: defined for INT64_MIN too (whose negation does not fit an int64).
inline uint64_t magnitude(int64_t ns) {
  return ns < 0 ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
}

// A double -> int64 conversion that is defined for every input: nullopt for NaN, infinities and
// values outside [-2^63, 2^63). (static_cast of such a double is undefined behaviour.)
inline std::optional<int64_t> checked_int64(double value) {
  // 2^63 is exactly representable; every double below it fits an int64.
  constexpr double kLimit = 9223372036854775808.0;
  if (!(value >= -kLimit && value < kLimit)) return std::nullopt;  // NaN fails both tests
  return static_cast<int64_t>(value);
}

// A double -> uint64 conversion (byte counts averaged in double) that is defined for every
// input: NaN and negatives give 0, values at or past 2^64 give UINT64_MAX.
inline uint64_t saturating_uint64(double value) {
  constexpr double kLimit = 18446744073709551616.0;  // 2^64
  if (!(value > 0)) return 0;
  if (value >= kLimit) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(value);
}

// Microseconds (Kineto / Chrome `ts` and `dur`) to nanoseconds, rounded: nullopt when the value
// is not finite or the time is outside +-kMaxPlausibleTimeNs.
inline std::optional<int64_t> checked_micros_to_ns(double micros) {
  if (!std::isfinite(micros)) return std::nullopt;
  const double ns = std::round(micros * 1000.0);
  if (!(std::fabs(ns) < static_cast<double>(kMaxPlausibleTimeNs))) return std::nullopt;
  return static_cast<int64_t>(ns);
}

}  // namespace moescope::trace
