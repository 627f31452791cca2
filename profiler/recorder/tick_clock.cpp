#include "recorder/tick_clock.h"

#include <time.h>

namespace moescope::recorder {

uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

TickConverter::SyncPoint TickConverter::sample() {
  // Bracket the clock read with two tick reads and take the midpoint, so a preemption between
  // the reads shows up as a wide bracket instead of a skewed point; retry a few times.
  SyncPoint best{read_ticks(), monotonic_ns()};
  uint64_t best_width = ~0ull;
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint64_t before = read_ticks();
    uint64_t ns = monotonic_ns();
    uint64_t after = read_ticks();
    if (after - before < best_width) {
      best_width = after - before;
      best = SyncPoint{before + (after - before) / 2, ns};
    }
  }
  return best;
}

TickConverter::TickConverter() {
  previous_ = sample();
  current_ = previous_;
#if defined(__x86_64__)
  // Until a second sync point exists, estimate the TSC rate over a short busy interval.
  uint64_t start_ns = monotonic_ns();
  while (monotonic_ns() - start_ns < 200000) {
  }
  SyncPoint later = sample();
  ns_per_tick_ = later.ticks > previous_.ticks
                     ? double(later.ns - previous_.ns) / double(later.ticks - previous_.ticks)
                     : 1.0;
  current_ = later;
#else
  ns_per_tick_ = 1.0;
#endif
}

void TickConverter::add_sync_point() {
#if defined(__x86_64__)
  // Keep segments at least 10 ms long so clock-read jitter stays in the parts per million.
  constexpr uint64_t kMinSegmentNs = 10'000'000;
  SyncPoint now = sample();
  if (now.ns - current_.ns < kMinSegmentNs) {
    // Only the first segment (the 200 us calibration) can be shorter: lengthen it to this
    // point. Its rate then comes from the longer baseline, and ticks read before this point
    // are interpolated: extrapolating the calibration's rate (about 1e-4 off from clock-read
    // jitter) put events hundreds of ns off in recordings shorter than 10 ms.
    if (current_.ns - previous_.ns < kMinSegmentNs && now.ticks > previous_.ticks) {
      current_ = now;
      ns_per_tick_ = double(current_.ns - previous_.ns) / double(current_.ticks - previous_.ticks);
    }
    return;
  }
  previous_ = current_;
  current_ = now;
  if (current_.ticks > previous_.ticks) {
    ns_per_tick_ = double(current_.ns - previous_.ns) / double(current_.ticks - previous_.ticks);
  }
#endif
}

uint64_t TickConverter::to_ns(uint64_t ticks) const {
#if defined(__x86_64__)
  int64_t delta = static_cast<int64_t>(ticks - current_.ticks);
  return current_.ns + static_cast<int64_t>(static_cast<double>(delta) * ns_per_tick_);
#else
  return ticks;
#endif
}

}  // namespace moescope::recorder
