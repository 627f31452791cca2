#include "tick_clock.h"

#include <time.h>

#include <algorithm>
#include <utility>

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

TickConverter::TickConverter() : source_(&TickConverter::sample) {
#if defined(__x86_64__)
  calibrate();
#else
  ticks_are_ns_ = true;
#endif
}

TickConverter::TickConverter(SyncSource source) : source_(std::move(source)) {
  calibrate();
}

void TickConverter::calibrate() {
  previous_ = source_();
  // Until a second sync point exists, estimate the tick rate over a short busy interval.
  constexpr uint64_t kCalibrationNs = 200'000;
  SyncPoint later = source_();
  while (later.ns - previous_.ns < kCalibrationNs) later = source_();
  ns_per_tick_ = later.ticks > previous_.ticks
                     ? double(later.ns - previous_.ns) / double(later.ticks - previous_.ticks)
                     : 1.0;
  current_ = later;
}

void TickConverter::add_sync_point() {
  if (ticks_are_ns_) return;
  // Keep segments at least 10 ms long so clock-read jitter stays in the parts per million.
  constexpr uint64_t kMinSegmentNs = 10'000'000;
  SyncPoint now = source_();
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
}

uint64_t TickConverter::to_ns(uint64_t ticks) const {
  if (ticks_are_ns_) return ticks;
  int64_t delta = static_cast<int64_t>(ticks - current_.ticks);
  return current_.ns + static_cast<int64_t>(static_cast<double>(delta) * ns_per_tick_);
}

uint64_t TickConverter::to_ns_not_before(uint64_t ticks, uint64_t& stream_last_ns) const {
  stream_last_ns = std::max(to_ns(ticks), stream_last_ns);
  return stream_last_ns;
}

}  // namespace moescope::recorder
