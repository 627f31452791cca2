// The MoE router: a linear gate computed in (at least) fp32, scores, expert selection and the
// balancing losses. Selection sees the aux-loss-free bias and the group limit; the combine
// weights come from the unbiased scores, so the bias steers load without changing outputs'
// scale.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "moescope/runtime/moe_config.h"

namespace moescope::runtime {

/// Balancing losses of one forward, already multiplied by their coefficients. A loss whose
/// coefficient is 0 is an undefined tensor. Each defined loss is a 0-dim tensor with autograd.
struct RouterLosses {
  at::Tensor aux_loss;      // Switch/GShard: coeff * E * sum_i f_i * P_i
  at::Tensor seq_aux_loss;  // the same per sequence, averaged over sequences
  at::Tensor z_loss;        // coeff * mean(logsumexp(logits)^2)

  /// Sum of the defined losses (a 0-dim tensor of `like`'s options, 0 when none is defined).
  at::Tensor total(const at::TensorOptions& like) const;
};

/// What the router decided for a batch of T tokens.
struct RoutingResult {
  at::Tensor logits;             // [T, E] router dtype (fp32, or fp64 for fp64 input)
  at::Tensor scores;             // [T, E] softmax or sigmoid of logits
  at::Tensor top_k_indices;      // [T, K] int64 expert ids chosen for each token
  at::Tensor top_k_weights;      // [T, K] router dtype combine weights (with autograd)
  at::Tensor tokens_per_expert;  // [E] int64 assignments per expert before capacity dropping
  RouterLosses losses;
};

class RouterImpl : public torch::nn::Module {
 public:
  explicit RouterImpl(const MoEConfig& config);

  /// Routes `hidden` [T, H]. `sequence_length` > 0 splits the T tokens into T / sequence_length
  /// sequences for the sequence aux loss. `replayed_indices` [T, K] int64 bypasses selection
  /// (routing replay): the weights are still gathered from the current scores.
  RoutingResult forward(const at::Tensor& hidden, int64_t sequence_length = 0,
                        const std::optional<at::Tensor>& replayed_indices = std::nullopt);

  /// Aux-loss-free balancing step: bias += rate * sign(mean(load) - load). `load` [E] holds
  /// tokens per expert (summed over the expert-parallel group by the caller).
  void update_expert_bias(const at::Tensor& load);

  const MoEConfig& config() const { return config_; }

  at::Tensor gate_weight;  // [E, H] parameter, kept in fp32 unless the module is moved to fp64
  at::Tensor expert_bias;  // [E] buffer, selection-only bias (zeros unless enable_expert_bias)
  at::Tensor logit_skew;   // [E] buffer, config.gate_logit_skew (zeros when empty)

 private:
  at::Tensor select_experts(const at::Tensor& scores) const;
  MoEConfig config_;
};
TORCH_MODULE(Router);

/// Experts each token is forced to in uniform mode: token t gets (t*K + k) % E. Returns [T, K].
at::Tensor forced_uniform_indices(int64_t num_tokens, int64_t top_k, int64_t num_experts,
                                  const at::TensorOptions& options);

}  // namespace moescope::runtime
