// Router and output statistics of one MoE layer forward, computed for the trace.
//
// They run on every layer of every step while a recorder is active, so they read the tensors
// once on the host and allocate nothing the size of a tensor: torch operators would each cost a
// dispatch and a temporary, and the temporaries alone change how the training run uses memory.
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

/// scores [T, E] router scores (any float dtype, any device; copied to the host as fp32).
RouterStatistics router_statistics(const at::Tensor& scores);

/// Number of NaN/Inf elements of `tensor` (any shape, dtype and device); 0 for an undefined or
/// empty tensor. fp32 host tensors are counted in one pass; others are checked with one reduction
/// and counted exactly only when that reduction is not finite.
uint32_t count_nonfinite(const at::Tensor& tensor);

}  // namespace moescope::runtime
