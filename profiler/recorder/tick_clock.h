// The recorder's clock: cheap CPU ticks on the hot path, converted to CLOCK_MONOTONIC
// nanoseconds by the flush thread. On x86-64 ticks are the TSC (about 8 ns to read here versus
// 18 ns for clock_gettime); elsewhere they are already nanoseconds.
#pragma once

#include <cstdint>
#include <functional>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace moescope::recorder {

uint64_t monotonic_ns();

inline uint64_t read_ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return monotonic_ns();
#endif
}

// Maps ticks to nanoseconds through the line between two (ticks, ns) sync points. The flush
// thread adds a sync point before each drain, so every conversion interpolates (or briefly
// extrapolates) over at most one flush interval: accurate to well under a microsecond and
// monotonic within a segment.
//
// A new sync point moves the line by the clock-read jitter (tens of ns), forwards or backwards:
// ticks that the old line extrapolated and later ticks that the new line converts can come out
// in the wrong order. to_ns_not_before() converts one thread's records without going back.
class TickConverter {
 public:
  struct SyncPoint {
    uint64_t ticks;
    uint64_t ns;
  };
  // Where sync points come from: tests script them; the default reads the CPU and the clock.
  using SyncSource = std::function<SyncPoint()>;

  TickConverter();
  explicit TickConverter(SyncSource source);
  void add_sync_point();
  uint64_t to_ns(uint64_t ticks) const;
  // to_ns() for the records of one stream in the order they were stamped: never earlier than
  // `stream_last_ns` (the stream's previous result, 0 at first), which it advances. After a sync
  // point moved the line back by d ns, the stream's records within d ns of it keep the previous
  // time: each is then no further from its true time than the record before it.
  uint64_t to_ns_not_before(uint64_t ticks, uint64_t& stream_last_ns) const;

 private:
  static SyncPoint sample();
  void calibrate();
  SyncSource source_;
  bool ticks_are_ns_ = false;  // not x86-64: ticks are CLOCK_MONOTONIC already
  SyncPoint previous_{};
  SyncPoint current_{};
  double ns_per_tick_ = 1.0;
};

}  // namespace moescope::recorder
