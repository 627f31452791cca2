// Costs of a plan's change for the step cost terms (plan_change_costs.h).
#include "plan_change_costs.h"

#include <stdexcept>

#include "moescope/balancer/expert_migration.h"

namespace moescope::cli {
namespace {

int replicated_experts(const balancer::ExpertPlacement& placement, int layer) {
  int replicated = 0;
  for (int32_t count : placement.logcnt(layer)) replicated += count > 1 ? 1 : 0;
  return replicated;
}

}  // namespace

// Replicas before (the current placement, else none) and after, and the expert copies from
// the placement before to the plan.
analysis::PlacementChangeCosts placement_change_costs(
    const ChangeCostOptions& options, const balancer::ExpertPlacement& plan,
    const std::optional<balancer::ExpertPlacement>& current, size_t current_copies,
    int num_experts) {
  analysis::PlacementChangeCosts costs;
  costs.expert_bytes = options.expert_bytes;
  costs.moved_tensors_per_expert = options.moved_tensors;
  costs.window_steps = options.window_steps;
  costs.rebalancer = !options.static_placement;
  costs.sync_collectives_per_layer = options.replica_sync_collectives;
  costs.rebalancer_collectives_per_step = options.rebalancer_collectives;
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    costs.replicated_before.push_back(current ? replicated_experts(*current, layer) : 0);
    costs.replicated_after.push_back(replicated_experts(plan, layer));
  }
  if (current) {
    costs.expert_copies = current_copies;
  } else {
    // A fresh plan starts from the identity placement: the copies to reach the plan from it.
    const int nodes =
        plan.policy == balancer::PlacementPolicy::kHierarchical ? options.num_nodes : 1;
    try {
      const balancer::ExpertPlacement identity =
          balancer::make_identity_placement(plan.num_layers, num_experts, plan.num_gpus);
      if (identity.num_physical_experts == plan.num_physical_experts) {
        costs.expert_copies = balancer::plan_expert_migration(identity, plan, nodes).moves.size();
      } else {
        // Redundant slots (no identity of that size): at least each replica is a copy.
        for (int layer = 0; layer < plan.num_layers; ++layer) {
          for (int32_t count : plan.logcnt(layer)) costs.expert_copies += size_t(count - 1);
        }
      }
    } catch (const std::invalid_argument&) {
      // experts not divisible by GPUs: no identity placement; copies stay unknown (0)
    }
  }
  return costs;
}

}  // namespace moescope::cli
