// ExpertRebalancer: periodic expert re-placement for a model's MoE layers, between steps.
//
// After every step it sums each layer's tokens per expert over the group and feeds a load
// predictor (moescope_balancer). Every interval_steps it plans a new placement per layer from
// the forecast (incremental EPLB planning: experts stay put unless a rank would be overloaded)
// and applies it when both hold:
//   predicted imbalance (max/mean per-rank load, current placement) > imbalance_threshold
//   gain > cost, with
//     gain = mean step time * (1 - imbalance_after / imbalance_before) * interval_steps
//     cost = bytes the migration moves / transfer_bytes_per_second
// (the step is assumed to be bound by its busiest rank, as in expert parallelism it is).
// Applying moves expert weights, gradients and optimizer state over the group
// (MoELayer::apply_placement). Every decision, applied or not, is recorded in the trace
// (moescope_rebalance: imbalance before/after, bytes moved, time taken) with the predicted
// loads, the replica counts and the forecast's accuracy.
//
// Checkpoints: save()/load() carry what the next decisions depend on (each layer's placement,
// the load forecast, the steps and step time since the last decision). Each layer's expert
// weights and optimizer state are saved per slot by the model and its optimizer, so they and
// the rebalancer must be saved and loaded together.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/balancer/load_predictor.h"
#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime {

struct RebalancerOptions {
  int64_t interval_steps = 50;              // steps between decisions
  int64_t warmup_steps = 10;                // steps observed before the first decision
  double imbalance_threshold = 1.10;        // predicted max/mean per-rank load worth acting on
  double transfer_bytes_per_second = 10e9;  // expected migration bandwidth, for the cost
  double incremental_max_over_mean = 1.02;  // PlacementConfig::incremental_max_over_mean
  balancer::LoadPredictorConfig predictor;  // EMA by default
  int accuracy_horizon_steps = 10;          // window of the forecast's accuracy score
};

/// One layer's decision at one step.
struct RebalanceDecision {
  int64_t step = 0;
  int64_t layer = 0;              // MoEConfig.layer_index
  double imbalance_before = 1.0;  // predicted, current placement
  double imbalance_after = 1.0;   // predicted, planned placement
  double gain_seconds = 0.0;
  double cost_seconds = 0.0;
  int64_t bytes_to_move = 0;  // over the whole group, estimated from the plan
  bool applied = false;
  PlacementChange change;  // what apply_placement did (applied only)
};

class ExpertRebalancer {
 public:
  /// `layers` share one expert-parallel group; `optimizers` hold their expert weights' state
  /// (moved with the weights). Throws c10::Error naming the option or layer at fault.
  ExpertRebalancer(std::vector<MoELayer> layers, const RebalancerOptions& options,
                   std::vector<torch::optim::Optimizer*> optimizers = {});

  /// Call on every rank together after each step's optimizer update: one all-reduce of the
  /// layers' tokens per expert and the step time, then (every interval_steps after warm-up) a
  /// decision per layer. `step_seconds` is this rank's wall time of the step. Returns the
  /// decisions taken at this step (empty on other steps).
  std::vector<RebalanceDecision> after_step(int64_t step, double step_seconds);

  /// More per-slot tensors of the layer at `layer_position` (each [S_local, ...]) that a decision
  /// moves with its experts and counts in the migration cost: the optimizer state of an
  /// optimizer LibTorch does not own (Python's torch.optim). Replaces what was set before; the
  /// tensors must be the live ones at the next after_step.
  void set_extra_slot_state(size_t layer_position, std::vector<at::Tensor> tensors);

  const balancer::ExpertLoadForecaster& forecaster() const { return forecaster_; }
  const RebalancerOptions& options() const { return options_; }

  /// Writes every layer's placement (phy2log, in the layer's slot order), the forecaster's state
  /// and the decision counters into `archive`.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what save() wrote into a rebalancer over the same layers (layer indices, experts,
  /// slots, ranks), predictor and accuracy horizon: each layer takes the saved placement as the
  /// one its slots hold (MoELayer::restore_placement; nothing moves), so load the model and the
  /// optimizers from the same checkpoint. `what` names the archive in errors. Throws c10::Error
  /// naming a missing entry or the mismatch.
  void load(torch::serialize::InputArchive& archive, const std::string& what);

 private:
  RebalanceDecision decide(size_t layer_position, int64_t step, double step_seconds);

  std::vector<MoELayer> layers_;
  RebalancerOptions options_;
  std::vector<torch::optim::Optimizer*> optimizers_;
  std::vector<std::vector<at::Tensor>> extra_slot_state_;  // per layer, set_extra_slot_state
  balancer::ExpertLoadForecaster forecaster_;
  int64_t observed_steps_ = 0;
  double step_seconds_sum_ = 0.0;  // group-mean step time summed since the last decision
  int64_t steps_since_decision_ = 0;
};

}  // namespace moescope::runtime
