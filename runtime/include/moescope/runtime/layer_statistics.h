// Router and output statistics of one MoE layer forward, computed for the trace.
//
// They run on every layer of every step while a recorder is active, and must not make the host
// wait for a GPU. So they are computed where the tensors live, into one small fp64 tensor per
// layer and step (pack_layer_statistics), which travels to the host in one non-blocking copy
// (HostCopyInFlight) and is read there once it has landed (unpack_layer_statistics).
//
// Two arithmetics fill that tensor. Device tensors take tensor ops (a few small kernels, no host
// sync). CPU tensors take host loops that read each tensor once and allocate nothing the size of
// a tensor: torch operators would each cost a dispatch and a temporary, and the temporaries alone
// changed how the CPU training run used memory (page faults) enough to show in the step time.
// Both give the same values (the tensor ops in fp64 too); tests check one against the other.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace moescope::runtime {

struct RouterStatistics {
  /// Mean over tokens of the entropy (nats) of each token's scores normalized to sum 1; NaN
  /// without tokens.
  float entropy = 0.0f;
  /// [E] mean score of each expert over the tokens (raw scores, not normalized).
  std::vector<float> mean_score;
};

/// scores [T, E] router scores (any float dtype; a device tensor is copied to the host, blocking).
RouterStatistics router_statistics(const at::Tensor& scores);

/// Number of NaN/Inf elements of `tensor` (any shape, dtype and device); 0 for an undefined or
/// empty tensor. fp32 host tensors are counted in one pass; others are checked with one reduction
/// and counted exactly only when that reduction is not finite (one blocking read on a device).
uint32_t count_nonfinite(const at::Tensor& tensor);

/// What one layer forward reports, as the runtime holds it (on the layer's device). Only
/// tokens_per_expert is required.
struct LayerStatisticsInputs {
  at::Tensor tokens_per_expert;  // [E] integer, routed assignments per expert
  at::Tensor scores;             // [T, E] router scores (for the entropy and mean scores)
  at::Tensor logits;             // [T, E] router logits (NaN/Inf count)
  at::Tensor expert_output;      // [R, H] expert rows (NaN/Inf count)
  at::Tensor aux_loss, z_loss;   // 0-dim
  at::Tensor expert_bias;        // [E]
};

enum class StatisticsArithmetic {
  kHostLoops,  // CPU tensors only: loops over the host memory
  kTensorOps,  // any device: tensor ops, no host sync
};

/// kHostLoops for CPU tensors, kTensorOps on any other device.
StatisticsArithmetic default_statistics_arithmetic(const at::Device& device);

/// The statistics of `inputs` as one contiguous fp64 tensor on their device, [3E + 5] with an
/// expert bias, [2E + 5] without:
///
///   [0, E)   tokens per expert      2E     router entropy     2E+3  NaN/Inf logits
///   [E, 2E)  mean score per expert  2E+1   aux loss           2E+4  NaN/Inf expert outputs
///                                   2E+2   z loss             [2E+5, 3E+5)  expert bias
///
/// Undefined losses are NaN, undefined logits/outputs count 0; without scores (or tokens) the
/// entropy and mean scores are NaN.
at::Tensor pack_layer_statistics(const LayerStatisticsInputs& inputs,
                                 StatisticsArithmetic arithmetic);

/// A packed tensor read back on the host.
struct LayerStatistics {
  std::vector<int64_t> tokens_per_expert;  // [E]
  std::vector<float> mean_score;           // [E]
  float entropy = 0.0f;
  float aux_loss = 0.0f, z_loss = 0.0f;  // NaN when undefined
  uint32_t nonfinite_logits = 0, nonfinite_outputs = 0;
  std::vector<float> expert_bias;  // [E], empty without a bias
};

/// packed: a host tensor from pack_layer_statistics of a layer with `num_experts` experts.
LayerStatistics unpack_layer_statistics(const at::Tensor& packed, int64_t num_experts);

}  // namespace moescope::runtime
