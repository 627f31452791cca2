#include "moescope/trace/trigger_reason.h"

namespace moescope::trace {

const char* trigger_reason_name(uint32_t reason) {
  switch (static_cast<TriggerReason>(reason)) {
    case TriggerReason::kSignal:
      return "signal";
    case TriggerReason::kHang:
      return "hang";
    case TriggerReason::kCrash:
      return "crash";
    case TriggerReason::kException:
      return "exception";
    case TriggerReason::kExit:
      return "exit";
    case TriggerReason::kCollectiveTimeout:
      return "collective_timeout";
    case TriggerReason::kSlowStep:
      return "slow_step";
    case TriggerReason::kPeer:
      return "peer";
    case TriggerReason::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace moescope::trace
