// One layer's rebalance decision, taken from a load forecast: the runtime's rebalancer
// (runtime/expert_rebalancer.h) takes it between steps, and `moescope plan` replays it on a
// recorded run's loads (rebalance_replay.h), so the two cannot drift apart.
//
//   1. imbalance_before = max/mean per-GPU load of the forecast on the current placement; at or
//      below the threshold the layer is balanced enough and nothing is planned.
//   2. The candidate: plan_incremental_for_next_window over the forecast and the forecast plus
//      each of its recent window errors (next_window_placement.h), or the forecast alone.
//   3. The cost rule (rebalance_cost_model.h) judges the candidate with the given rates: the
//      busiest GPU's rows saved against the replicas' added gradient sync and the migration.
//      Or, with RebalanceRule::kImbalanceGain, the earlier rule: the mean step time x
//      (1 - imbalance_after / imbalance_before) x the interval against the bytes moved at an
//      assumed bandwidth (the cost rule's terms are still computed, for the trace).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moescope/balancer/expert_placement.h"
#include "moescope/balancer/load_predictor.h"
#include "moescope/balancer/rebalance_cost_model.h"

namespace moescope::balancer {

enum class RebalanceRule {
  kPredictedNetGain,  // the cost rule (rebalance_cost_model.h)
  kImbalanceGain,     // gain by the imbalance ratio vs bytes / transfer_bytes_per_second
};

/// How the runtime rebalancer decides: when (every interval after the warm-up), from which
/// forecast, and by which bound. Declared once: ExpertRebalancer's options extend it
/// (runtime/expert_rebalancer.h) and replay_rebalancer takes it (rebalance_replay.h).
struct RebalancePolicy {
  int64_t interval_steps = 50;        // steps between decisions
  int64_t warmup_steps = 10;          // steps observed before the first decision
  double imbalance_threshold = 1.10;  // forecast max/mean per-GPU load worth planning for
  int64_t window_steps = 0;           // steps a placement is expected to be kept; 0: the interval
  bool decide_on_lower_bound = true;  // cost rule: the net's lower 95% bound must be a gain
  // The training loop sums the replicas' gradients inside an all-reduce it makes anyway
  // (MoELayer::replica_gradient_partial_sums): a replica adds bytes to it, not a collective.
  bool replica_gradients_packed = false;
  double incremental_max_over_mean = 1.02;  // PlacementConfig::incremental_max_over_mean
  // Weigh each plan over the forecast and the forecast plus each of its last window errors
  // (plan_incremental_for_next_window); false: the forecast's incremental plan alone.
  bool plan_for_next_window = true;
  LoadPredictorConfig predictor;    // EMA by default
  int accuracy_horizon_steps = 10;  // window of the forecast's accuracy score
  RebalanceRule rule = RebalanceRule::kPredictedNetGain;
  // Assumed bandwidth of migrations (kImbalanceGain's cost; the cost rule's until measured).
  double transfer_bytes_per_second = 10e9;

  double kept_steps() const { return double(window_steps > 0 ? window_steps : interval_steps); }
  /// Whether the layers are decided after a step, with `observed` steps seen in all and
  /// `since_decision` since the last decision (both counting that step).
  bool decides_after(int64_t observed, int64_t since_decision) const {
    return observed >= warmup_steps && since_decision >= interval_steps;
  }
};

/// Bytes of one expert slot.
struct ExpertSlotBytes {
  double migrated = 0;  // its weights plus the optimizer state that travels with them
  double gradient = 0;  // its gradient, what a replica's all-reduce sums
  double row = 0;       // one token row in the all-to-all
};

struct LayerRebalanceDecision {
  double imbalance_before = 1, imbalance_after = 1;        // of the forecast
  double busiest_rows_before = 0, busiest_rows_after = 0;  // of the forecast, per step
  ExpertPlacement candidate;                               // the current one when not planned
  size_t moves = 0;                                        // expert copies to reach it
  double bytes_to_move = 0;                                // over the whole group
  int replicated_before = 0, replicated_after = 0;         // experts with more than one slot
  RebalanceVerdict verdict;                                // reason kBalanced when not planned
  // The imbalance rule's terms over the interval (0 when not planned), whichever rule decided.
  double imbalance_gain_seconds = 0, imbalance_cost_seconds = 0;
};

/// `forecast` [num_experts] tokens per step; `recent_errors` each [num_experts] (actual window
/// mean - forecast); `current` a one-layer placement; `mean_step_seconds` the steps' mean time
/// since the last decision (the imbalance rule's gain). Throws std::invalid_argument when the
/// shapes do not match.
LayerRebalanceDecision decide_layer_rebalance(
    std::span<const double> forecast, const std::vector<std::vector<double>>& recent_errors,
    const ExpertPlacement& current, const RebalancePolicy& policy, const ExpertSlotBytes& bytes,
    const RebalanceCostRates& rates, double mean_step_seconds);

/// The one-layer placement a runtime layer's slots start from: the identity without spare slots,
/// else the plan of uniform loads (the spare slots replicate the first experts).
ExpertPlacement initial_slot_placement(int num_experts, int num_slots, int num_gpus);

/// Experts of layer 0 of `placement` with more than one slot.
int replicated_experts(const ExpertPlacement& placement);

/// Max per-GPU load of `loads` [num_experts] on layer 0 of `placement` (replicas share evenly).
double busiest_gpu_load(std::span<const double> loads, const ExpertPlacement& placement);

}  // namespace moescope::balancer
