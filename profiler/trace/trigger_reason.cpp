#include "moescope/trace/trigger_reason.h"

#include <array>
#include <cstddef>

namespace moescope::trace {
namespace {

// Indexed by TriggerReason's value: the values are 0..8 with no gap.
constexpr std::array<const char*, 9> kTriggerReasonNames = {
    "unknown",   "signal", "hang", "crash", "exception", "exit", "collective_timeout",
    "slow_step", "peer"};
static_assert(static_cast<std::size_t>(TriggerReason::kPeer) + 1 == kTriggerReasonNames.size(),
              "a new TriggerReason needs its name here");

}  // namespace

const char* trigger_reason_name(uint32_t reason) {
  return reason < kTriggerReasonNames.size() ? kTriggerReasonNames[reason] : "unknown";
}

}  // namespace moescope::trace
