// ExpertRebalancer: periodic expert re-placement for a model's MoE layers, between steps.
//
// After every step it sums each layer's tokens per expert over the group and feeds a load
// predictor (moescope_balancer). Every interval_steps it plans a new placement per layer for
// the next window (incremental EPLB planning: experts stay put unless a rank would be
// overloaded; each plan weighed over the forecast and the forecast plus each of its last
// window errors, balancer/next_window_placement.h) when the predicted imbalance (max/mean per-rank
// load, current placement) is above imbalance_threshold, and decides whether to apply it by
// RebalancerOptions::rule:
//   kPredictedNetGain (default): the cost rule of balancer/rebalance_cost_model.h, over the
//     next window_steps: the busiest rank's rows saved x the measured ms per row (expert compute
//     and all-to-all) minus the replicas' added gradient all-reduce per step minus the move's
//     one-off cost amortised over the window; applied when the net's lower 95% bound is a gain.
//     The rates come from what the runtime times itself (layer_cost_samples.h: expert compute,
//     dispatch all-to-all and replica all-reduce on CPU devices; its own load all-reduce; the
//     moves it applied), kept as running least-squares fits whose sums are all-reduced with the
//     loads, so every rank holds the same fits and takes the same decision.
//   kImbalanceGain: the earlier rule, gain = mean step time x (1 - imbalance_after /
//     imbalance_before) x interval_steps against cost = bytes moved / transfer_bytes_per_second.
// Applying moves expert weights, gradients and optimizer state over the group
// (MoELayer::apply_placement). Every decision, applied or not, is recorded in the trace
// (moescope_rebalance_decision: imbalance before/after, bytes moved, time taken, and the cost
// rule's numbers: rows of the busiest rank, gain, replica sync, migration, window, net, reason)
// with the predicted loads, the replica counts and the forecast's accuracy.
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

#include "moescope/balancer/layer_rebalance.h"
#include "moescope/balancer/load_predictor.h"
#include "moescope/balancer/rebalance_cost_model.h"
#include "moescope/balancer/running_line_fit.h"
#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime {

using RebalanceRule = balancer::RebalanceRule;

/// The shared decision policy (balancer/layer_rebalance.h: interval, warm-up, threshold,
/// window, bound, forecast, rule) plus the cost rule's counts of the runtime's passes.
struct RebalancerOptions : balancer::RebalancePolicy {
  double compute_passes_per_step = 3;  // expert compute per step / the forward's (+ backward)
  double all_to_alls_per_step = 4;     // dispatch + combine, forward and backward
};

/// One layer's decision at one step.
struct RebalanceDecision {
  int64_t step = 0;
  int64_t layer = 0;              // MoEConfig.layer_index
  double imbalance_before = 1.0;  // predicted, current placement
  double imbalance_after = 1.0;   // predicted, planned placement
  double gain_seconds = 0.0;      // the imbalance rule's terms over the interval (either rule)
  double cost_seconds = 0.0;
  int64_t bytes_to_move = 0;  // over the whole group, estimated from the plan
  bool applied = false;
  PlacementChange change;  // what apply_placement did (applied only)
  // The cost rule's numbers (recorded under either rule; the reason says which rule decided).
  double busiest_rows_before = 0, busiest_rows_after = 0;  // predicted, per step
  balancer::RebalanceVerdict verdict;
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
  /// after_step's two halves, for a loop that sums them in an all-reduce of its own (moe_train
  /// packs them into its step statistics): this rank's [layers x experts tokens of the last
  /// forward, step_seconds, the cost fits' sums] as a [local_step_sums_size()] double tensor
  /// on the CPU (call once per step: it takes the layers' cost samples) ...
  at::Tensor local_step_sums(double step_seconds);
  /// ... and the decisions from `summed`, those sums added over the group (same layout, any
  /// device). Throws c10::Error on another size.
  std::vector<RebalanceDecision> after_summed_step(int64_t step, const at::Tensor& summed);
  int64_t local_step_sums_size() const;
  /// An all-reduce the loop timed itself (e.g. the gradient all-reduce the replicas' gradients
  /// ride on): `bytes` it carried in `milliseconds`; feeds the all-reduce cost fit.
  void observe_all_reduce(double bytes, double milliseconds);

  /// More per-slot tensors of the layer at `layer_position` (each [S_local, ...]) that a decision
  /// moves with its experts and counts in the migration cost: the optimizer state of an
  /// optimizer LibTorch does not own (Python's torch.optim). Replaces what was set before; the
  /// tensors must be the live ones at the next after_step.
  void set_extra_slot_state(size_t layer_position, std::vector<at::Tensor> tensors);

  const balancer::ExpertLoadForecaster& forecaster() const { return forecaster_; }
  /// The rates the cost rule uses now (the same on every rank of the group).
  balancer::RebalanceCostRates cost_rates(double assumed_ms_per_row) const;
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
  RebalanceDecision decide(size_t layer_position, int64_t step, double step_seconds,
                           double assumed_ms_per_row);
  /// The layers' cost samples of this step and what the rebalancer timed itself, as the sums
  /// the step's all-reduce adds over the group: [kNumCostFits x RunningLineFit::kNumSums].
  std::vector<double> take_local_cost_sums();
  void record_decision(const RebalanceDecision& decision, const MoELayerImpl& layer,
                       const std::vector<double>& forecast) const;

  std::vector<MoELayer> layers_;
  RebalancerOptions options_;
  std::vector<torch::optim::Optimizer*> optimizers_;
  std::vector<std::vector<at::Tensor>> extra_slot_state_;  // per layer, set_extra_slot_state
  balancer::ExpertLoadForecaster forecaster_;
  int64_t observed_steps_ = 0;
  double step_seconds_sum_ = 0.0;  // group-mean step time summed since the last decision
  int64_t steps_since_decision_ = 0;
  // The group's cost fits (all-reduced sums; not checkpointed: a resumed run measures anew).
  balancer::RunningLineFit compute_fit_, dispatch_fit_, all_reduce_fit_, migration_fit_;
  balancer::RunningLineFit own_all_reduce_, own_migrations_;  // this rank's, until the next step
};

}  // namespace moescope::runtime
