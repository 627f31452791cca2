#include "moescope/runtime/router.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/init.h>

#include <limits>

#include "cuda_kernel_path.h"
#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The fused router kernel must compute exactly what the ATen path below computes: scores =
// softmax|sigmoid(logits); selection on scores + expert_bias with the same group limit (a group's
// score is the sum of its top-2); weights = gathered unbiased scores, divided by (sum + 1e-20) when
// normalising, times routed_scaling_factor. kernel_path::router_covers() says for which configs it
// does; routing replay (selection is bypassed) and fp64 routers (router_applies() takes float32
// logits only) stay on ATen too.
bool use_fused_router(const MoEConfig& config, const at::Tensor& logits, bool has_replay) {
  return !has_replay && kernel_path::enabled_for(config.use_fused_kernels, logits) &&
         kernel_path::router_covers(config) &&
         kernel_path::router_applies(kernel_path::router_config(config), logits);
}

// logits [T, E] -> {scores [T, E], top_k_ids [T, K] int32, top_k_weights [T, K],
// selections_per_expert [E] int32} in one kernel; backward in one kernel too. Gradients reach the
// logits from both the weights and the scores (balancing losses); ids and counts carry none, and
// neither does the selection-only expert bias.
struct FusedRouterFunction : public torch::autograd::Function<FusedRouterFunction> {
  // expert_bias: [E] float32, nullptr without the bias (a pointer: custom Functions take no
  // undefined tensors).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits,
                               const at::Tensor* expert_bias, const MoEConfig& config) {
    const kernels::RouterConfig router = kernel_path::router_config(config);
    kernel_path::FusedRouterOutputs out = kernel_path::router_forward(
        logits.contiguous(), expert_bias != nullptr ? *expert_bias : at::Tensor(), router);
    ctx->mark_non_differentiable({out.top_k_ids, out.selections_per_expert});
    ctx->set_materialize_grads(false);  // unused scores/weights: undefined, not zero-filled
    ctx->save_for_backward({out.scores, out.top_k_ids});
    ctx->saved_data["router_config"] = kernel_path::router_config_to_ivalue(router);
    return {out.scores, out.top_k_ids, out.top_k_weights, out.selections_per_expert};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& scores = saved[0];
    const at::Tensor& top_k_ids = saved[1];
    const at::Tensor& grad_scores = grad_outputs[0];
    at::Tensor grad_weights = grad_outputs[2];
    if (!grad_scores.defined() && !grad_weights.defined()) {
      return {at::Tensor(), at::Tensor(), at::Tensor()};
    }
    if (!grad_weights.defined()) grad_weights = at::zeros(top_k_ids.sizes(), scores.options());
    // Exactly the settings the forward ran with, not a mapping of a rebuilt MoEConfig.
    const at::Tensor grad_logits = kernel_path::router_backward(
        scores, top_k_ids, grad_weights.to(at::kFloat).contiguous(),
        grad_scores.defined() ? grad_scores.to(at::kFloat).contiguous() : at::Tensor(),
        kernel_path::router_config_from_ivalue(ctx->saved_data["router_config"]));
    return {grad_logits, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor RouterLosses::total(const at::TensorOptions& like) const {
  at::Tensor sum = at::zeros({}, like);
  for (const at::Tensor* loss : {&aux_loss, &seq_aux_loss, &z_loss}) {
    if (loss->defined()) sum = sum + loss->to(like.dtype());
  }
  return sum;
}

RouterImpl::RouterImpl(const MoEConfig& config) : config_(config) {
  validate_moe_config(config_);
  gate_weight = register_parameter(
      "gate_weight", at::empty({config_.num_experts, config_.hidden_size}, at::kFloat));
  torch::nn::init::normal_(gate_weight, 0.0, config_.init_std);
  expert_bias = register_buffer("expert_bias", at::zeros({config_.num_experts}, at::kFloat));
  at::Tensor skew = at::zeros({config_.num_experts}, at::kDouble);
  for (size_t e = 0; e < config_.gate_logit_skew.size(); ++e) {
    skew[static_cast<int64_t>(e)] = config_.gate_logit_skew[e];
  }
  // fp64, so an fp64 layer sees the configured skew exactly.
  logit_skew = register_buffer("logit_skew", skew);
}

at::Tensor forced_uniform_indices(int64_t num_tokens, int64_t top_k, int64_t num_experts,
                                  const at::TensorOptions& options) {
  at::Tensor slots = at::arange(num_tokens * top_k, options.dtype(at::kLong));
  return slots.remainder(num_experts).view({num_tokens, top_k});
}

// Picks top-k experts per token from the selection scores [T, E] (bias and group limit
// applied here only, so the combine weights stay unbiased).
at::Tensor RouterImpl::select_experts(const at::Tensor& scores) const {
  at::Tensor selection = scores;
  if (config_.enable_expert_bias) selection = selection + expert_bias.to(scores.scalar_type());
  if (config_.num_groups > 1) {
    const int64_t num_tokens = scores.size(0);
    const int64_t experts_per_group = config_.num_experts / config_.num_groups;
    at::Tensor grouped = selection.view({num_tokens, config_.num_groups, experts_per_group});
    // A group's score is the sum of its best two experts (one when a group holds one expert).
    at::Tensor group_scores =
        std::get<0>(grouped.topk(std::min<int64_t>(2, experts_per_group), -1)).sum(-1);
    at::Tensor best_groups = std::get<1>(group_scores.topk(config_.group_top_k, -1));
    at::Tensor group_mask = at::zeros_like(group_scores, at::kBool)
                                .scatter_(1, best_groups, true)
                                .unsqueeze(-1)
                                .expand({num_tokens, config_.num_groups, experts_per_group})
                                .reshape({num_tokens, config_.num_experts});
    selection =
        selection.masked_fill(group_mask.logical_not(), -std::numeric_limits<double>::infinity());
  }
  return std::get<1>(selection.topk(config_.top_k, -1));
}

RoutingResult RouterImpl::forward(const at::Tensor& hidden, int64_t sequence_length,
                                  const std::optional<at::Tensor>& replayed_indices) {
  TORCH_CHECK(hidden.dim() == 2, "Router: hidden must be [num_tokens, hidden], got ",
              hidden.sizes());
  TORCH_CHECK(hidden.size(1) == config_.hidden_size, "Router: hidden size ", hidden.size(1),
              " does not match MoEConfig.hidden_size ", config_.hidden_size);
  const int64_t num_tokens = hidden.size(0);
  const int64_t num_experts = config_.num_experts;
  const int64_t top_k = config_.top_k;
  // The router runs in fp32 for bf16/fp16/fp32 input and in fp64 for fp64 input.
  const at::ScalarType router_dtype =
      hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;

  RoutingResult result;
  result.logits = at::linear(hidden.to(router_dtype), gate_weight.to(router_dtype));
  if (!config_.gate_logit_skew.empty()) {
    result.logits = result.logits + logit_skew.to(router_dtype);
  }
  if (config_.nonfinite_policy == NonFinitePolicy::kError && num_tokens > 0) {
    TORCH_CHECK(read_scalar(at::isfinite(result.logits).all()).to<bool>(), "MoE layer ",
                config_.layer_index,
                ": router logits contain NaN or Inf (check the input hidden states; "
                "NonFinitePolicy::kDontCheck disables this check)");
  }
  if (use_fused_router(config_, result.logits, replayed_indices.has_value())) {
    const at::Tensor bias =
        config_.enable_expert_bias ? expert_bias.to(at::kFloat).contiguous() : at::Tensor();
    const variable_list fused = FusedRouterFunction::apply(
        result.logits, config_.enable_expert_bias ? &bias : nullptr, config_);
    result.scores = fused[0];
    result.top_k_indices = fused[1].to(at::kLong);
    result.top_k_weights = fused[2];
    result.tokens_per_expert = fused[3].to(at::kLong);
  } else {
    result.scores = config_.score_function == ScoreFunction::kSoftmax
                        ? at::softmax(result.logits, -1)
                        : at::sigmoid(result.logits);

    if (replayed_indices.has_value()) {
      const at::Tensor& replayed = *replayed_indices;
      TORCH_CHECK(
          replayed.dim() == 2 && replayed.size(0) == num_tokens && replayed.size(1) == top_k,
          "Router: replayed routing for layer ", config_.layer_index, " has shape ",
          replayed.sizes(), ", expected [", num_tokens, ", ", top_k, "]");
      TORCH_CHECK(replayed.scalar_type() == at::kLong, "Router: replayed routing must be int64");
      if (replayed.numel() > 0) {
        TORCH_CHECK(read_scalar(replayed.min()).to<int64_t>() >= 0 &&
                        read_scalar(replayed.max()).to<int64_t>() < num_experts,
                    "Router: replayed routing holds expert ids outside [0, ", num_experts, ")");
      }
      result.top_k_indices = replayed.to(hidden.device());
    } else if (config_.force_uniform_routing) {
      result.top_k_indices =
          forced_uniform_indices(num_tokens, top_k, num_experts, hidden.options());
    } else {
      at::NoGradGuard no_grad;
      result.top_k_indices = select_experts(result.scores.detach());
    }

    result.top_k_weights = result.scores.gather(1, result.top_k_indices);
    if (config_.normalize_top_k_weights) {
      result.top_k_weights =
          result.top_k_weights / (result.top_k_weights.sum(-1, /*keepdim=*/true) + 1e-20);
    }
    if (config_.routed_scaling_factor != 1.0) {
      result.top_k_weights = result.top_k_weights * config_.routed_scaling_factor;
    }
    result.tokens_per_expert = at::bincount(result.top_k_indices.flatten(), {}, num_experts);
  }

  if (num_tokens == 0) return result;  // losses of an empty batch stay undefined (zero)

  // Probabilities for the balancing losses sum to one per token (sigmoid scores normalised).
  const bool needs_probs = config_.aux_loss_coeff > 0 || config_.seq_aux_loss_coeff > 0;
  at::Tensor probs;
  if (needs_probs) {
    probs = config_.score_function == ScoreFunction::kSoftmax
                ? result.scores
                : result.scores / (result.scores.sum(-1, /*keepdim=*/true) + 1e-20);
  }
  if (config_.aux_loss_coeff > 0) {
    at::Tensor token_share =
        result.tokens_per_expert.to(router_dtype) / static_cast<double>(num_tokens * top_k);  // f_i
    at::Tensor mean_prob = probs.mean(0);                                                     // P_i
    result.losses.aux_loss =
        (token_share * mean_prob).sum() * (config_.aux_loss_coeff * num_experts);
  }
  if (config_.seq_aux_loss_coeff > 0) {
    TORCH_CHECK(sequence_length > 0 && num_tokens % sequence_length == 0,
                "MoEConfig.seq_aux_loss_coeff needs [batch, seq, hidden] input (got ", num_tokens,
                " tokens and sequence length ", sequence_length, ")");
    const int64_t num_sequences = num_tokens / sequence_length;
    at::Tensor chosen = at::zeros({num_tokens, num_experts}, probs.options())
                            .scatter_(1, result.top_k_indices, 1.0)
                            .view({num_sequences, sequence_length, num_experts});
    at::Tensor token_share = chosen.sum(1) / static_cast<double>(sequence_length * top_k);
    at::Tensor mean_prob = probs.view({num_sequences, sequence_length, num_experts}).mean(1);
    result.losses.seq_aux_loss =
        (token_share * mean_prob).sum(-1).mean() * (config_.seq_aux_loss_coeff * num_experts);
  }
  if (config_.z_loss_coeff > 0) {
    result.losses.z_loss = at::logsumexp(result.logits, -1).square().mean() * config_.z_loss_coeff;
  }
  return result;
}

void RouterImpl::update_expert_bias(const at::Tensor& load) {
  TORCH_CHECK(config_.enable_expert_bias,
              "update_expert_bias: MoEConfig.enable_expert_bias is false for layer ",
              config_.layer_index);
  TORCH_CHECK(load.dim() == 1 && load.size(0) == config_.num_experts,
              "update_expert_bias: load must be [num_experts=", config_.num_experts, "], got ",
              load.sizes());
  at::NoGradGuard no_grad;
  at::Tensor load_f = load.to(expert_bias.device(), at::kDouble);
  at::Tensor step = at::sign(load_f.mean() - load_f) * config_.expert_bias_update_rate;
  expert_bias.add_(step.to(expert_bias.scalar_type()));
}

}  // namespace moescope::runtime
