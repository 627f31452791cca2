#include "moe_transformer.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/init.h>

#include <string>
#include <unordered_set>

namespace moe_train {

using moescope::runtime::ExpertParallelGroup;
using moescope::runtime::MoEConfig;
using moescope::runtime::MoELayer;

namespace {

constexpr double kInitStd = 0.02;

void init_linear(torch::nn::Linear& linear) {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(linear->weight, 0.0, kInitStd);
  if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t hidden_size, int64_t num_heads)
    : num_heads_(num_heads) {
  qkv = register_module("qkv", torch::nn::Linear(hidden_size, 3 * hidden_size));
  proj = register_module("proj", torch::nn::Linear(hidden_size, hidden_size));
  init_linear(qkv);
  init_linear(proj);
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  const int64_t batch = x.size(0), seq = x.size(1), hidden = x.size(2);
  const int64_t head_dim = hidden / num_heads_;
  // [B, S, 3H] -> 3 x [B, heads, S, head_dim]
  auto qkv_heads =
      qkv->forward(x).view({batch, seq, 3, num_heads_, head_dim}).permute({2, 0, 3, 1, 4});
  at::Tensor attended = at::scaled_dot_product_attention(qkv_heads[0], qkv_heads[1], qkv_heads[2],
                                                         /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                         /*is_causal=*/true);
  return proj->forward(attended.transpose(1, 2).reshape({batch, seq, hidden}));
}

TransformerBlockImpl::TransformerBlockImpl(const TransformerConfig& config, int64_t layer_index,
                                           ExpertParallelGroup group) {
  attention_norm = register_module(
      "attention_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size})));
  attention =
      register_module("attention", CausalSelfAttention(config.hidden_size, config.num_heads));
  moe_norm = register_module(
      "moe_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size})));
  MoEConfig moe_config = config.moe;
  moe_config.layer_index = layer_index;
  moe_config.init_std = kInitStd;
  if (config.gate_skew != 0.0 && (config.skew_layer < 0 || config.skew_layer == layer_index)) {
    moe_config.gate_logit_skew =
        moescope::runtime::make_gate_skew(moe_config.num_experts, config.gate_skew);
  }
  moe = register_module("moe", MoELayer(moe_config, std::move(group)));
}

BlockOutput TransformerBlockImpl::forward(const at::Tensor& x) {
  at::Tensor hidden = x + attention->forward(attention_norm->forward(x));
  moescope::runtime::MoEOutput routed = moe->forward(moe_norm->forward(hidden));
  return {hidden + routed.output, routed.aux_loss, routed.tokens_per_expert,
          routed.num_dropped + routed.num_dropped_by_receive_cap};
}

MoETransformerImpl::MoETransformerImpl(const TransformerConfig& config, ExpertParallelGroup group)
    : config_(config) {
  token_embedding = register_module("token_embedding",
                                    torch::nn::Embedding(config.vocab_size, config.hidden_size));
  position_embedding = register_module(
      "position_embedding", torch::nn::Embedding(config.max_seq_len, config.hidden_size));
  {
    torch::NoGradGuard no_grad;
    torch::nn::init::normal_(token_embedding->weight, 0.0, kInitStd);
    torch::nn::init::normal_(position_embedding->weight, 0.0, kInitStd);
  }
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    blocks.push_back(
        register_module("block" + std::to_string(layer), TransformerBlock(config, layer, group)));
  }
  final_norm = register_module(
      "final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size})));
  output_bias = register_parameter("output_bias", at::zeros({config.vocab_size}));
}

LanguageModelOutput MoETransformerImpl::forward(const at::Tensor& tokens) {
  TORCH_CHECK(tokens.dim() == 2, "MoETransformer: tokens must be [batch, seq], got ",
              tokens.sizes());
  const int64_t seq = tokens.size(1);
  TORCH_CHECK(seq <= config_.max_seq_len, "MoETransformer: sequence length ", seq,
              " exceeds max_seq_len ", config_.max_seq_len);
  at::Tensor positions = at::arange(seq, tokens.options());
  at::Tensor hidden = token_embedding->forward(tokens) + position_embedding->forward(positions);

  LanguageModelOutput result;
  result.aux_loss = at::zeros({}, hidden.options().dtype(at::kFloat));
  for (auto& block : blocks) {
    BlockOutput out = block->forward(hidden);
    hidden = out.hidden;
    result.aux_loss = result.aux_loss + out.aux_loss.to(at::kFloat);
    result.tokens_per_expert.push_back(out.tokens_per_expert);
    result.num_dropped += out.num_dropped;
  }
  // Tied LM head: logits = norm(h) @ E^T, in float32 for a stable cross entropy. [B, S, V]
  result.logits =
      (at::matmul(final_norm->forward(hidden), token_embedding->weight.t()) + output_bias)
          .to(at::kFloat);
  return result;
}

std::vector<at::Tensor> MoETransformerImpl::replicated_parameters() {
  std::unordered_set<const c10::TensorImpl*> sharded;
  for (auto& block : blocks) {
    for (const auto& parameter : block->moe->experts->parameters()) {
      sharded.insert(parameter.unsafeGetTensorImpl());
    }
  }
  std::vector<at::Tensor> replicated;
  for (const auto& parameter : parameters()) {
    if (!sharded.count(parameter.unsafeGetTensorImpl())) replicated.push_back(parameter);
  }
  return replicated;
}

std::vector<MoELayer> MoETransformerImpl::moe_layers() const {
  std::vector<MoELayer> layers;
  for (const auto& block : blocks) layers.push_back(block->moe);
  return layers;
}

}  // namespace moe_train
