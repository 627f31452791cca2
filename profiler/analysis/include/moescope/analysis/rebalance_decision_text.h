// The runtime's rebalancing decisions as the report shows them: one per step and layer (every
// rank of the group takes the same decision; the lowest rank's record stands for it), with the
// numbers it was taken on (trace format 3; older traces' decisions have none).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"
#include "moescope/trace/rebalance_reason.h"

namespace moescope::analysis {

/// The decisions that carry their numbers, one per (step, layer), in step then layer order.
/// `keep(decision)` says whether the report's step/rank filter keeps it.
template <typename Keep>
std::vector<RebalanceDecision> decisions_with_costs(const std::vector<RebalanceDecision>& all,
                                                    Keep keep);

/// "rebalance at step 7 layer 1: kept, predicted gain 1.20 ms/step < replica sync 2.30 ms/step +
/// migration 4.00 ms / 10 steps; net -1.50 +- 0.30 ms/step (the costs exceed the gain)".
std::string describe_rebalance_decision(const RebalanceDecision& decision);

/// What the reason code means ("the costs exceed the gain", ...): trace/rebalance_reason.h.
using trace::rebalance_reason_text;

template <typename Keep>
std::vector<RebalanceDecision> decisions_with_costs(const std::vector<RebalanceDecision>& all,
                                                    Keep keep) {
  std::vector<RebalanceDecision> chosen;
  for (const RebalanceDecision& decision : all) {
    if (!decision.has_costs || !keep(decision)) continue;
    bool replaced = false;
    for (RebalanceDecision& other : chosen) {
      if (other.step != decision.step || other.layer != decision.layer) continue;
      if (decision.rank < other.rank) other = decision;
      replaced = true;
      break;
    }
    if (!replaced) chosen.push_back(decision);
  }
  std::stable_sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) {
    return a.step != b.step ? a.step < b.step : a.layer < b.layer;
  });
  return chosen;
}

}  // namespace moescope::analysis
