// MoEConfig: every option of moescope::runtime::MoELayer in one plain struct.
//
// The defaults describe a dropless, softmax top-2 layer without balancing losses. Fields are
// checked by validate_moe_config(), which MoELayer's constructor calls, so a bad setting fails
// at construction with a c10::Error naming the field, not deep inside forward().
#pragma once

#include <cstdint>
#include <vector>

namespace moescope::runtime {

/// How router logits become per-expert scores.
enum class ScoreFunction {
  kSoftmax,  // scores = softmax(logits), sum to 1 over experts (Switch, Mixtral)
  kSigmoid,  // scores = sigmoid(logits), independent per expert (DeepSeek-V3)
};

/// What a rank does with rows beyond MoEConfig.receive_cap_rows.
enum class ReceiveCapPolicy {
  kDropLowestProbability,  // keep the rows with the largest router weight
  kDropLatestPosition,     // keep the rows of the earliest tokens
  kFail,                   // throw a c10::Error naming the cap and the load
};
inline constexpr int kNumReceiveCapPolicies = 3;

/// Which assignments an over-capacity expert keeps.
enum class DropPolicy {
  kByProbability,  // keep the assignments with the highest routing weight
  kByPosition,     // keep the earliest tokens in the batch (cheaper, order dependent)
};

/// What the router does when its logits contain NaN or Inf.
enum class NonFinitePolicy {
  kError,      // throw a c10::Error naming the layer (default; costs one host sync per forward)
  kDontCheck,  // no check: NaN propagates into the output, counted only while recording a trace
};

struct MoEConfig {
  // ---- shapes --------------------------------------------------------------------------------
  int64_t hidden_size = 0;      // model width H; input is [num_tokens, H] or [batch, seq, H]
  int64_t ffn_hidden_size = 0;  // per-expert SwiGLU width F
  int64_t num_experts = 0;      // routed experts E across the whole expert-parallel group
  int64_t top_k = 2;            // experts per token, 1 <= top_k <= num_experts

  // ---- router ----------------------------------------------------------------------------------
  ScoreFunction score_function = ScoreFunction::kSoftmax;
  // Divide the top-k weights by their sum (usual with sigmoid scores).
  bool normalize_top_k_weights = false;
  // Multiplies the combine weights (DeepSeek's routed_scaling_factor).
  double routed_scaling_factor = 1.0;
  // Group-limited routing: experts form num_groups equal groups; a token may only pick experts
  // from the group_top_k groups with the largest sum of their top-2 scores. 1 = off.
  int64_t num_groups = 1;
  int64_t group_top_k = 1;
  NonFinitePolicy nonfinite_policy = NonFinitePolicy::kError;

  // ---- balancing -------------------------------------------------------------------------------
  // Switch/GShard loss coeff * E * sum_i f_i * P_i over the whole batch. 0 = not computed.
  double aux_loss_coeff = 0.0;
  // The same per sequence, averaged over sequences (needs [batch, seq, H] input). 0 = off.
  double seq_aux_loss_coeff = 0.0;
  // coeff * mean(logsumexp(logits)^2). 0 = off.
  double z_loss_coeff = 0.0;
  // Aux-loss-free balancing (DeepSeek-V3): a per-expert bias added to the scores for expert
  // selection only; MoELayer::update_expert_bias() applies bias += rate * sign(mean - load).
  bool enable_expert_bias = false;
  double expert_bias_update_rate = 1e-3;

  // ---- synthetic routing (benchmarks, demos) ---------------------------------------------------
  // Added to the router logits, one value per expert (empty = none). make_gate_skew() builds one.
  std::vector<double> gate_logit_skew;
  // Token t goes to experts (t*top_k + k) % E: perfectly balanced, for best-case measurements.
  // The combine weights still come from the router scores, so gradients keep flowing.
  bool force_uniform_routing = false;

  // ---- capacity --------------------------------------------------------------------------------
  // <= 0: dropless. Otherwise each expert keeps at most
  // ceil(local_tokens * top_k * capacity_factor / num_experts) assignments per forward.
  double capacity_factor = 0.0;
  DropPolicy drop_policy = DropPolicy::kByProbability;

  // ---- expert placement (load balancing) ------------------------------------------------------
  // Extra physical expert slots over the whole group, for replicas of hot experts (EPLB's
  // redundant experts): the layer holds S = num_experts + num_redundant_experts slots, S / ep_size
  // on each rank, and a token routed to a replicated expert goes to one of its replicas.
  // 0 without a placement: expert e lives in slot e, on rank e / (num_experts / ep_size).
  int64_t num_redundant_experts = 0;

  // ---- memory --------------------------------------------------------------------------------
  // Rows (token copies) this rank's experts accept per forward, against cold-start overload;
  // 0 = no cap. Over the cap the senders drop rows (receive_cap_policy decides which) or the
  // forward fails with a c10::Error naming the cap and the load.
  int64_t receive_cap_rows = 0;
  ReceiveCapPolicy receive_cap_policy = ReceiveCapPolicy::kDropLowestProbability;
  // Dispatch/combine rows live in a DispatchBufferPool sized from the predicted load: no
  // allocation for them in steady state. Headroom over the largest per-rank load seen/predicted.
  bool use_dispatch_buffer_pool = false;
  double dispatch_buffer_headroom = 1.25;

  // ---- shared experts --------------------------------------------------------------------------
  // Experts every token goes through (DeepSeek's shared experts), as one SwiGLU of width
  // num_shared_experts * shared_ffn_hidden_size (0 = ffn_hidden_size). Replicated on each rank.
  int64_t num_shared_experts = 0;
  int64_t shared_ffn_hidden_size = 0;

  // ---- kernels ---------------------------------------------------------------------------------
  // On CUDA tensors, run the router, the routing map, permute and unpermute+combine (forward and
  // backward) and the grouped GEMMs that at::_grouped_mm does not take (fp32) through
  // moescope_kernels' CUDA kernels, each when this build has them and the op supports the sizes
  // and dtypes; everything else, and everything when false, runs on ATen (docs/runtime.md).
  // CPU tensors always run on ATen.
  bool use_fused_kernels = true;

  // ---- memory ----------------------------------------------------------------------------------
  // Experts save only their input rows and the [R, 2F] pre-activation and recompute
  // silu(gate) and the [R, F] activation in backward: 2 * R * F fewer saved elements per layer
  // (R = rows this rank's experts compute) for one silu and one multiply more.
  bool recompute_expert_activation = false;

  // ---- bookkeeping -----------------------------------------------------------------------------
  int64_t layer_index = 0;  // names the layer in traces and routing replays
  double init_std = 0.02;   // std of the normal initialisation of every weight
};

/// Checks every field of `config` for an expert-parallel group of `ep_size` ranks; throws a
/// c10::Error naming the first bad field.
void validate_moe_config(const MoEConfig& config, int64_t ep_size = 1);

/// A linear per-expert logit skew: expert 0 gets +strength, the last expert 0. Returns [E].
std::vector<double> make_gate_skew(int64_t num_experts, double strength);

/// Physical expert slots of the whole group: num_experts + num_redundant_experts.
inline int64_t num_expert_slots(const MoEConfig& config) {
  return config.num_experts + config.num_redundant_experts;
}

/// Capacity per expert for `num_tokens` local tokens; -1 when the layer is dropless.
int64_t expert_capacity(const MoEConfig& config, int64_t num_tokens);

}  // namespace moescope::runtime
