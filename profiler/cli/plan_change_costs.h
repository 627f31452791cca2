// What a plan's change costs besides moving rows (`moescope plan`'s step cost terms,
// step_cost_terms.h): replicated experts before and after, and the expert copies to reach it.
#pragma once

#include <cstddef>
#include <optional>

#include "moescope/analysis/step_cost_terms.h"
#include "moescope/balancer/expert_placement.h"

namespace moescope::cli {

struct ChangeCostOptions {
  double expert_bytes = 0;           // --expert-bytes
  double moved_tensors = 4;          // --moved-tensors
  double window_steps = 50;          // --window
  bool static_placement = false;     // --static
  int replica_sync_collectives = 0;  // --replica-sync-collectives
  int rebalancer_collectives = 0;    // --rebalancer-collectives
  int num_nodes = 1;
};

/// `current`: the placement before (--current), else the identity one; `current_copies`: the
/// incremental plan's moves from it (with `current`).
analysis::PlacementChangeCosts placement_change_costs(
    const ChangeCostOptions& options, const balancer::ExpertPlacement& plan,
    const std::optional<balancer::ExpertPlacement>& current, size_t current_copies,
    int num_experts);

}  // namespace moescope::cli
