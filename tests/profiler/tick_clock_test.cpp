// The recorder's clock: a tick read between two CLOCK_MONOTONIC reads converts to a time
// between them.
#include <gtest/gtest.h>

#include <string>

#include "recorder/tick_clock.h"

namespace moescope::recorder {
namespace {

// A sync point pairs a tick read with a clock read taken a few ns apart, so an interpolated time
// may land that far outside the reads around the tick (seen: 1 ns on an idle machine). The bug
// these tests guard against put events 100-400 ns off.
constexpr uint64_t kSyncJitterNs = 50;

bool within(uint64_t at, uint64_t before, uint64_t after) {
  return at + kSyncJitterNs >= before && at <= after + kSyncJitterNs;
}

// A recording shorter than one 10 ms segment: the flush at its end adds a sync point after
// the events, so they are interpolated between the calibration at start and that point. When
// the converter ignored that sync point and extrapolated the 200 us calibration's rate
// instead, about 1 event in 50 landed outside the clock reads around it (by up to ~400 ns,
// under ASan on a loaded 2-core machine), failing RecorderApi.EveryEventKindRoundTrips now and
// then. 300 short recordings caught that nearly every run.
TEST(TickClock, ShortRecordingConvertsBetweenTheClockReadsAroundIt) {
  int outside = 0;
  std::string first_miss;
  for (int trial = 0; trial < 300; ++trial) {
    TickConverter clock;  // what Recorder::start does
    const uint64_t until = monotonic_ns() + uint64_t(trial % 10) * 200'000;  // 0..1.8 ms in
    while (monotonic_ns() < until) {
    }
    const uint64_t before = monotonic_ns();
    const uint64_t ticks = read_ticks();
    const uint64_t after = monotonic_ns();
    clock.add_sync_point();  // what the final drain does, before converting
    const uint64_t at = clock.to_ns(ticks);
    if (!within(at, before, after)) {
      if (outside++ == 0) {
        first_miss = "trial " + std::to_string(trial) + ": " + std::to_string(at) + " not in [" +
                     std::to_string(before) + ", " + std::to_string(after) + "]";
      }
    }
  }
  EXPECT_EQ(outside, 0) << first_miss;
}

// Long recordings are cut into segments of at least 10 ms: a tick read in the middle of one
// converts between the clock reads around it once the segment's end point exists.
TEST(TickClock, TicksInsideALaterSegmentAreInterpolated) {
  TickConverter clock;
  int outside = 0;
  for (int segment = 0; segment < 5; ++segment) {
    uint64_t until = monotonic_ns() + 5'000'000;
    while (monotonic_ns() < until) {
    }
    const uint64_t before = monotonic_ns();
    const uint64_t ticks = read_ticks();
    const uint64_t after = monotonic_ns();
    until = monotonic_ns() + 6'000'000;  // the segment ends >= 10 ms after the last one
    while (monotonic_ns() < until) {
    }
    clock.add_sync_point();
    const uint64_t at = clock.to_ns(ticks);
    if (!within(at, before, after)) ++outside;
  }
  EXPECT_EQ(outside, 0);
}

}  // namespace
}  // namespace moescope::recorder
