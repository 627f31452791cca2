// moescope::runtime::MoELayer: a drop-in replacement for a dense FFN.
//
//   MoEConfig config;
//   config.hidden_size = 512; config.ffn_hidden_size = 1024; config.num_experts = 8;
//   MoELayer moe(config);                         // or MoELayer(config, ExpertParallelGroup{pg})
//   MoEOutput out = moe->forward(hidden);         // hidden [T, H] or [B, S, H]
//   loss = task_loss(out.output) + out.aux_loss;  // the balancing losses are the caller's to add
//
// forward() reads route -> dispatch -> compute -> combine:
//   route     Router: fp32 gate, scores, top-k (group limit, bias), losses
//   dispatch  capacity dropping, permute into expert order, all-to-all to the experts' ranks
//   compute   grouped SwiGLU over the local experts (+ shared experts on every token)
//   combine   all-to-all back, weighted un-permute into token order
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "moescope/runtime/expert_parallel.h"
#include "moescope/runtime/grouped_experts.h"
#include "moescope/runtime/moe_config.h"
#include "moescope/runtime/router.h"
#include "moescope/runtime/routing_replay.h"

namespace moescope::runtime {

struct MoEOutput {
  at::Tensor output;             // same shape and dtype as the input
  at::Tensor aux_loss;           // 0-dim, input dtype: sum of the enabled balancing losses
  RouterLosses losses;           // each balancing loss on its own (undefined when disabled)
  at::Tensor tokens_per_expert;  // [E] int64 this rank's assignments per expert before drops
  int64_t num_dropped = 0;       // assignments the capacity limit dropped in this forward
};

class MoELayerImpl : public torch::nn::Module {
 public:
  /// `group` spreads the experts over its ranks (every rank builds the layer with the same
  /// config); the default is one process holding all experts.
  explicit MoELayerImpl(const MoEConfig& config, ExpertParallelGroup group = {});

  /// hidden [T, H] or [B, S, H], dtype of the expert weights. Every rank of the expert-parallel
  /// group must call forward together (T may differ between ranks, and may be 0).
  MoEOutput forward(const at::Tensor& hidden);

  /// The same layer computed by the loop-over-experts oracle (one process only): identical
  /// routing, capacity and shared experts; the routed experts run as a plain loop of autograd
  /// ops. The reference for tests and benchmarks.
  MoEOutput forward_loop_oracle(const at::Tensor& hidden);

  /// Aux-loss-free balancing: sums the tokens per expert routed since the last call over the
  /// group, applies bias += rate * sign(mean - load) and restarts the count. Call it on every
  /// rank together, e.g. after each optimizer step. Needs MoEConfig.enable_expert_bias.
  void update_expert_bias();

  /// Copies this rank's slice of full-size expert weights, w_gate_up [E, H, 2F] and
  /// w_down [E, F, H] (loading a checkpoint made with another expert-parallel size).
  void load_full_expert_weights(const at::Tensor& w_gate_up, const at::Tensor& w_down);

  /// Record (or replay) the experts chosen by each token; nullptr turns it off.
  void set_routing_replay(std::shared_ptr<RoutingReplay> replay) { replay_ = std::move(replay); }

  const MoEConfig& config() const { return config_; }
  const ExpertParallelGroup& group() const { return group_; }
  int64_t num_local_experts() const { return config_.num_experts / group_.size(); }
  int64_t first_local_expert() const { return group_.rank() * num_local_experts(); }

  Router router{nullptr};
  GroupedExperts experts{nullptr};         // this rank's routed experts
  GroupedExperts shared_experts{nullptr};  // one wide expert, or empty without shared experts
  at::Tensor accumulated_load;             // [E] int64 buffer: routed since the last bias update

 private:
  void check_input(const at::Tensor& hidden) const;
  RoutingResult route(const at::Tensor& tokens, int64_t sequence_length);
  at::Tensor add_shared_experts(const at::Tensor& routed_output, const at::Tensor& tokens,
                                bool use_oracle);

  MoEConfig config_;
  ExpertParallelGroup group_;
  std::shared_ptr<RoutingReplay> replay_;
};
TORCH_MODULE(MoELayer);

}  // namespace moescope::runtime
