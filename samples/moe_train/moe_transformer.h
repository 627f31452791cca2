// A small decoder-only transformer language model whose feed-forward blocks are
// moescope::runtime::MoELayer: embedding -> N x [pre-norm causal self-attention, pre-norm MoE]
// -> final norm -> LM head tied to the embedding.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <vector>

#include "moescope/runtime/moe_layer.h"

namespace moe_train {

struct TransformerConfig {
  int64_t vocab_size = 256;
  int64_t max_seq_len = 64;
  int64_t num_layers = 2;
  int64_t hidden_size = 64;
  int64_t num_heads = 4;
  // Settings every block's MoELayer shares; layer_index and gate_logit_skew are set per block.
  moescope::runtime::MoEConfig moe;
  double gate_skew = 0.0;   // strength of the per-expert logit skew
  int64_t skew_layer = -1;  // the block that gets it; -1 = every block
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t hidden_size, int64_t num_heads);
  /// x [B, S, H] -> [B, S, H]
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Linear qkv{nullptr};   // H -> 3H
  torch::nn::Linear proj{nullptr};  // H -> H

 private:
  int64_t num_heads_;
};
TORCH_MODULE(CausalSelfAttention);

struct BlockOutput {
  at::Tensor hidden;             // [B, S, H]
  at::Tensor aux_loss;           // 0-dim balancing losses of this block's MoE
  at::Tensor tokens_per_expert;  // [E] int64, this rank's assignments before drops
  int64_t num_dropped = 0;
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(const TransformerConfig& config, int64_t layer_index,
                       moescope::runtime::ExpertParallelGroup group);
  BlockOutput forward(const at::Tensor& x);

  torch::nn::LayerNorm attention_norm{nullptr};
  CausalSelfAttention attention{nullptr};
  torch::nn::LayerNorm moe_norm{nullptr};
  moescope::runtime::MoELayer moe{nullptr};
};
TORCH_MODULE(TransformerBlock);

struct LanguageModelOutput {
  at::Tensor logits;    // [B, S, V] float32
  at::Tensor aux_loss;  // 0-dim float32: sum of every block's balancing losses
  std::vector<at::Tensor> tokens_per_expert;  // per block: [E] int64, this rank
  int64_t num_dropped = 0;
};

class MoETransformerImpl : public torch::nn::Module {
 public:
  MoETransformerImpl(const TransformerConfig& config, moescope::runtime::ExpertParallelGroup group);
  /// tokens [B, S] int64, S <= max_seq_len.
  LanguageModelOutput forward(const at::Tensor& tokens);

  /// Parameters every rank holds a full copy of (embeddings, attention, norms, routers, shared
  /// experts): their gradients are averaged over the ranks. The routed experts are sharded.
  std::vector<at::Tensor> replicated_parameters();
  std::vector<moescope::runtime::MoELayer> moe_layers() const;
  const TransformerConfig& config() const { return config_; }

  torch::nn::Embedding token_embedding{nullptr};
  torch::nn::Embedding position_embedding{nullptr};
  std::vector<TransformerBlock> blocks;
  torch::nn::LayerNorm final_norm{nullptr};
  // [V] output bias (the learned log-prior of each byte), so the tied embedding need not carry it.
  at::Tensor output_bias;

 private:
  TransformerConfig config_;
};
TORCH_MODULE(MoETransformer);

}  // namespace moe_train
