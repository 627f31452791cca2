// Why the flight recorder wrote its ring: a trigger record's `reason` (docs/trace-format.md),
// named once for the recorder, the shim and the analyses. The values are those of the C API's
// moescope_trigger_reason (moescope/recorder.h), which the recorder checks at compile time.
#pragma once

#include <cstdint>

namespace moescope::trace {

enum class TriggerReason : uint32_t {
  kUnknown = 0,
  kSignal = 1,             // SIGUSR1 / `moescope dump`
  kHang = 2,               // watchdog: no step end and no collective progress
  kCrash = 3,              // fatal signal (code = signal number)
  kException = 4,          // uncaught Python exception
  kExit = 5,               // non-zero exit (code = status)
  kCollectiveTimeout = 6,  // reported by c10d
  kSlowStep = 7,           // a step over k times the rolling median
  kPeer = 8,               // another rank of the job triggered (origin_rank)
};

// "signal", "hang", "crash", "exception", "exit", "collective_timeout", "slow_step", "peer";
// "unknown" for any other value (a trace from a newer recorder).
const char* trigger_reason_name(uint32_t reason);

inline bool is_reason(uint32_t reason, TriggerReason expected) {
  return reason == static_cast<uint32_t>(expected);
}

}  // namespace moescope::trace
