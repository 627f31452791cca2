// --offload-cold-experts: the routed experts' AdamW state of every MoE layer lives in a
// moescope::runtime::ExpertOptimizerOffload, which keeps the state of experts predicted cold in
// host memory and prefetches it back when they are predicted hot.
//
// Per layer l: an EMA load predictor observes the layer's tokens per logical expert each step
// (summed over the ranks, [E]); every `interval` steps this rank's slice of the forecast
// ([first_local_expert, + num_local_experts)) goes to update_from_predicted_load(). The
// optimizer math is AdamW per expert slice, so the training equals one AdamW over the stacked
// tensors; only where the state lives changes.
//
// Checkpoints: save()/load() carry every layer's expert optimizer state (host or device) and
// the load forecast, so a resumed run offloads the same experts at the same steps.
#pragma once

#include <c10/core/TensorImpl.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "moescope/balancer/load_predictor.h"
#include "moescope/runtime/expert_optimizer_offload.h"
#include "moescope/runtime/moe_layer.h"

namespace moe_train {

/// What one layer's update changed, and where its state is now (this rank, bytes).
struct LayerOffloadReport {
  int64_t layer = 0;
  std::vector<int64_t> offloaded;   // local experts moved to the host now
  std::vector<int64_t> prefetched;  // local experts moved back now
  std::vector<int64_t> on_host;     // every local expert whose state is on the host
  int64_t host_state_bytes = 0;
  int64_t device_state_bytes = 0;
};

class ColdExpertOffload {
 public:
  /// layers: the model's MoE layers (without redundant slots, their placement never changing).
  /// options: AdamW settings of the main optimizer plus the cold-load threshold.
  ColdExpertOffload(std::vector<moescope::runtime::MoELayer> layers,
                    const moescope::runtime::ExpertOptimizerOptions& options, int64_t interval);

  /// The routed experts' stacked weights, which the main optimizer must leave alone.
  const std::unordered_set<const c10::TensorImpl*>& expert_parameters() const {
    return expert_parameters_;
  }

  void set_lr(double lr);
  void step();
  void zero_grad();

  /// Feeds one step's tokens per logical expert of every layer ([num_layers][E], summed over
  /// the ranks). Every `interval` steps (after steps interval-1, 2*interval-1, ...) moves state
  /// by the forecast and returns one report per layer; otherwise returns nothing.
  std::vector<LayerOffloadReport> after_step(int64_t step,
                                             const std::vector<std::vector<double>>& tokens);

  /// Every layer's expert optimizer, for MemorySources::expert_optimizers.
  std::vector<const moescope::runtime::ExpertOptimizerOffload*> expert_optimizers() const;
  int64_t offloaded_state_bytes() const;
  int64_t resident_state_bytes() const;

  /// Every layer's ExpertOptimizerOffload state and the load forecast.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what save() wrote; `what` names the archive in errors (c10::Error).
  void load(torch::serialize::InputArchive& archive, const std::string& what);

 private:
  std::vector<moescope::runtime::MoELayer> layers_;
  int64_t interval_;
  std::vector<std::unique_ptr<moescope::runtime::ExpertOptimizerOffload>> offloads_;  // [L]
  moescope::balancer::ExpertLoadForecaster forecaster_;  // EMA per layer over [E] logical experts
  std::unordered_set<const c10::TensorImpl*> expert_parameters_;
};

}  // namespace moe_train
