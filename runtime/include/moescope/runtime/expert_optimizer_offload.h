// ExpertOptimizerOffload: Adam/AdamW for stacked expert weights that keeps the optimizer state
// of cold experts in host memory.
//
// Adam's state is twice the size of the weights (three times with amsgrad), and in an MoE model
// most of it belongs to experts. Experts the load predictor expects to receive few tokens are
// "cold": their state moves to (pinned) host memory and their update runs on the host; experts
// predicted hot get their state prefetched back to the device. The update of every expert is
// torch::optim::Adam's / AdamW's own, run on that expert's slice, so the result equals one
// optimizer over the whole stacked tensors.
//
// Layout: each expert parameter is stacked, [G, ...] with local expert g in slice g
// (GroupedExperts' w_gate_up [G, H, 2F] and w_down [G, F, H]). Expert g gets its own optimizer over
// the views param[g] (resident) or over host copies of them (offloaded):
//
//   expert g resident:   optimizer_g params = { w_gate_up[g], w_down[g] }  (device views)
//                        state: exp_avg, exp_avg_sq (, max_exp_avg_sq) on the device
//   expert g offloaded:  optimizer_g params = { host copy of w_gate_up[g], ... }
//                        state on the host; step() copies the gradient slice to the host,
//                        updates there and copies the weights back
//
// Non-expert parameters (router, shared experts, the rest of the model) stay with the caller's
// ordinary optimizer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace torch::optim {
class Optimizer;
}
namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace moescope::runtime {

enum class ExpertOptimizerKind { kAdam, kAdamW };

struct ExpertOptimizerOptions {
  ExpertOptimizerKind kind = ExpertOptimizerKind::kAdam;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled decay
  bool amsgrad = false;
  /// update_from_predicted_load(): experts predicted to receive fewer tokens per step than this
  /// are offloaded, the others prefetched.
  double cold_load_threshold = 1.0;
  /// Host copies in pinned memory when the weights are on a CUDA device (asynchronous prefetch).
  bool pin_host_memory = true;
};

/// One expert's state for one stacked parameter (tensor handles, undefined before its first
/// step; max_exp_avg_sq only with amsgrad).
struct ExpertParamState {
  int64_t step = 0;
  at::Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
};

struct ExpertOffloadStats {
  int64_t offloads = 0;         // experts moved to the host
  int64_t prefetches = 0;       // experts moved back to the device
  int64_t bytes_to_host = 0;    // state bytes copied device -> host by offloads
  int64_t bytes_to_device = 0;  // state bytes copied host -> device by prefetches
  int64_t host_steps = 0;       // expert updates run on the host
  int64_t device_steps = 0;     // expert updates run on the device
};

/// What update_from_predicted_load() changed.
struct OffloadDecision {
  std::vector<int64_t> offloaded;   // experts moved to the host now
  std::vector<int64_t> prefetched;  // experts moved back now
};

class ExpertOptimizerOffload {
 public:
  /// expert_parameters: stacked [G, ...] tensors, all with the same G >= 1 and device, leaf
  /// tensors of the model (their .grad() is read by step()). Throws c10::Error naming the
  /// parameter index or option at fault.
  ExpertOptimizerOffload(std::vector<at::Tensor> expert_parameters,
                         const ExpertOptimizerOptions& options);
  ~ExpertOptimizerOffload();
  ExpertOptimizerOffload(const ExpertOptimizerOffload&) = delete;
  ExpertOptimizerOffload& operator=(const ExpertOptimizerOffload&) = delete;

  int64_t num_experts() const { return num_experts_; }
  int64_t num_parameters() const { return static_cast<int64_t>(parameters_.size()); }

  /// One optimizer step over every stacked parameter that has a gradient.
  void step();
  /// Sets the stacked parameters' gradients to undefined, like Optimizer::zero_grad().
  void zero_grad();
  void set_lr(double lr);

  /// predicted_tokens_per_step [G] (this rank's slice of LoadPredictor::predict()): offloads the
  /// resident experts below options.cold_load_threshold, prefetches the offloaded ones at or
  /// above it. Records nothing: call record() when this is the model's only expert optimizer,
  /// or put every layer's in MemorySources::expert_optimizers and record_memory_breakdown().
  OffloadDecision update_from_predicted_load(std::span<const double> predicted_tokens_per_step);
  void offload_expert(int64_t expert);
  void prefetch_expert(int64_t expert);

  bool is_offloaded(int64_t expert) const;
  std::vector<int64_t> offloaded_experts() const;
  /// State bytes on the device (resident experts).
  int64_t resident_state_bytes() const;
  /// State bytes held in host memory: the device memory saved.
  int64_t offloaded_state_bytes() const;
  const ExpertOffloadStats& stats() const { return stats_; }

  /// Expert `expert`'s state for stacked parameter `parameter_index`, wherever it lives.
  ExpertParamState state(int64_t expert, int64_t parameter_index) const;

  /// Checkpoints: writes every expert's optimizer state (step counts and moments, read from the
  /// host or the device, wherever the expert's state is), which experts are offloaded, and the
  /// stats. The stacked weights themselves are the model's to save.
  void save(torch::serialize::OutputArchive& archive) const;
  /// Restores what save() wrote into an offload over parameters of the same shapes with the
  /// same optimizer kind: each expert's state replaces its current one, and experts that were
  /// offloaded at the save go to the host again (the others to the device). Load the model's
  /// weights first: torch::nn::Module::load gives parameters new storage, and load() takes
  /// fresh views of them (step() throws if it finds its views stale). `what` names the archive
  /// in errors. Throws c10::Error naming a missing entry or the mismatch.
  void load(torch::serialize::InputArchive& archive, const std::string& what);

  /// Records "memory.optimizer_state_offloaded" and "memory.optimizer_state_expert_resident"
  /// counters (bytes). No-op unless a recorder is active.
  void record() const;

 private:
  struct Expert;
  void check_expert(int64_t expert, const char* what) const;
  /// Moves expert `expert`'s params and state to `to_host` (true) or back to the device.
  int64_t move_expert(Expert& expert, bool to_host);

  std::vector<at::Tensor> parameters_;  // stacked [G, ...]
  ExpertOptimizerOptions options_;
  int64_t num_experts_ = 0;
  std::vector<std::unique_ptr<Expert>> experts_;  // [G]
  ExpertOffloadStats stats_;
};

}  // namespace moescope::runtime
