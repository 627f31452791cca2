// One layer's rebalance decision (steps in layer_rebalance.h).
#include "moescope/balancer/layer_rebalance.h"

#include <stdexcept>
#include <string>

#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/next_window_placement.h"

namespace moescope::balancer {

ExpertPlacement initial_slot_placement(int num_experts, int num_slots, int num_gpus) {
  if (num_slots == num_experts) return make_identity_placement(1, num_experts, num_gpus);
  ExpertLoads uniform{1, num_experts, std::vector<double>(size_t(num_experts), 1.0)};
  PlacementConfig config;
  config.num_physical_experts = num_slots;
  config.num_gpus = num_gpus;
  config.policy = PlacementPolicy::kGlobal;
  return plan_expert_placement(uniform, config);
}

int replicated_experts(const ExpertPlacement& placement) {
  int replicated = 0;
  for (const int count : placement.logcnt(0)) replicated += count > 1 ? 1 : 0;
  return replicated;
}

double busiest_gpu_load(std::span<const double> loads, const ExpertPlacement& placement) {
  return summarize_gpu_loads(gpu_loads_of_placement(loads, placement, 0)).max_gpu_load;
}

LayerRebalanceDecision decide_layer_rebalance(
    std::span<const double> forecast, const std::vector<std::vector<double>>& recent_errors,
    const ExpertPlacement& current, const RebalancePolicy& policy, const ExpertSlotBytes& bytes,
    const RebalanceCostRates& rates, double mean_step_seconds) {
  if (current.num_layers != 1 || forecast.size() != size_t(current.num_logical_experts)) {
    throw std::invalid_argument(
        "decide_layer_rebalance: the forecast has " + std::to_string(forecast.size()) +
        " experts, the current placement " + std::to_string(current.num_logical_experts) +
        " over " + std::to_string(current.num_layers) + " layer(s) (one is needed)");
  }
  LayerRebalanceDecision decision;
  decision.candidate = current;
  const GpuLoadBalance before = summarize_gpu_loads(gpu_loads_of_placement(forecast, current, 0));
  decision.imbalance_before = decision.imbalance_after = before.max_over_mean();
  decision.busiest_rows_before = decision.busiest_rows_after = before.max_gpu_load;
  decision.replicated_before = decision.replicated_after = replicated_experts(current);
  decision.verdict.window_steps = policy.kept_steps();
  decision.verdict.reason = RebalanceReason::kBalanced;
  if (decision.imbalance_before <= policy.imbalance_threshold) return decision;

  const int experts = current.num_logical_experts;
  const ExpertLoads loads{1, experts, {forecast.begin(), forecast.end()}};
  std::vector<ExpertLoads> errors;
  if (policy.plan_for_next_window) {
    for (const std::vector<double>& error : recent_errors) errors.push_back({1, experts, error});
  }
  PlacementConfig config;
  config.num_physical_experts = current.num_physical_experts;
  config.num_gpus = current.num_gpus;
  config.policy = PlacementPolicy::kGlobal;
  config.incremental_max_over_mean = policy.incremental_max_over_mean;
  decision.candidate =
      plan_incremental_for_next_window(forecast_scenarios(loads, errors), config, current);
  const GpuLoadBalance after =
      summarize_gpu_loads(gpu_loads_of_placement(forecast, decision.candidate, 0));
  decision.imbalance_after = after.max_over_mean();
  decision.busiest_rows_after = after.max_gpu_load;
  decision.replicated_after = replicated_experts(decision.candidate);
  decision.moves = plan_expert_migration(current, decision.candidate).moves.size();
  decision.bytes_to_move = double(decision.moves) * bytes.migrated;

  RebalanceCandidate change;
  change.busiest_rows_before = decision.busiest_rows_before;
  change.busiest_rows_after = decision.busiest_rows_after;
  change.row_bytes = bytes.row;
  // MoELayer::sync_replica_gradients: one all-reduce while the layer has any replica, of every
  // replicated expert's gradient (none of its own when the loop packs them).
  change.sync_collectives_added = policy.replica_gradients_packed
                                      ? 0.0
                                      : double((decision.replicated_after > 0 ? 1 : 0) -
                                               (decision.replicated_before > 0 ? 1 : 0));
  change.sync_bytes_added =
      double(decision.replicated_after - decision.replicated_before) * bytes.gradient;
  change.migration_bytes = decision.bytes_to_move;
  change.window_steps = policy.kept_steps();
  change.moves = decision.moves > 0;
  decision.verdict = judge_rebalance(rates, change, policy.decide_on_lower_bound);
  decision.imbalance_gain_seconds = mean_step_seconds *
                                    (1.0 - decision.imbalance_after / decision.imbalance_before) *
                                    double(policy.interval_steps);
  decision.imbalance_cost_seconds = decision.bytes_to_move / policy.transfer_bytes_per_second;
  if (policy.rule == RebalanceRule::kImbalanceGain) {
    decision.verdict.apply =
        decision.moves > 0 && decision.imbalance_gain_seconds > decision.imbalance_cost_seconds;
    decision.verdict.reason = decision.verdict.apply ? RebalanceReason::kImbalanceRuleApplied
                                                     : RebalanceReason::kImbalanceRuleKept;
  }
  return decision;
}

}  // namespace moescope::balancer
