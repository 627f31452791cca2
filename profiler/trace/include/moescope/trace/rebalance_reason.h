// Why the runtime rebalancer applied or kept a plan: a rebalance record's `reason`
// (docs/trace-format.md), in words once for the report and moe_train's log. The codes
// are the C API's moescope_rebalance_reason (moescope/recorder.h), which the runtime checks
// against balancer::RebalanceReason at compile time (expert_rebalancer.cpp).
#pragma once

#include <cstdint>

namespace moescope::trace {

// "the net gain pays", "the costs exceed the gain", ...; "reason not recorded" for 0 (traces
// before the cost rule) and any unknown code.
const char* rebalance_reason_text(uint32_t reason);

}  // namespace moescope::trace
