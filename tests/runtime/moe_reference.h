// Test-only: an independent dense reference of the MoE layer and small helpers.
// The reference routes with per-token loops (sort, not topk), runs every token through every
// expert and masks the results by the routing, so it shares no code path with the runtime.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>

#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime::testing {

struct ReferenceResult {
  at::Tensor output;         // [T, H]
  at::Tensor aux_loss;       // 0-dim, sum of enabled losses
  at::Tensor top_k_indices;  // [T, K]
  at::Tensor keep_mask;      // [T, K] bool
  int64_t num_dropped = 0;
};

/// The dense reference forward with `layer`'s parameters (autograd flows into them and into
/// `hidden`). hidden: [T, H] or [B, S, H].
ReferenceResult dense_reference_forward(MoELayerImpl& layer, const at::Tensor& hidden);

/// Max |a - b| (0 for empty tensors); both must be defined.
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

/// Runs `body`, expects a c10::Error whose message contains every one of `needles`.
void expect_error_mentions(const std::function<void()>& body,
                           const std::vector<std::string>& needles);

/// A small config most tests start from.
MoEConfig small_config(int64_t hidden = 16, int64_t ffn = 24, int64_t experts = 8,
                       int64_t top_k = 2);

}  // namespace moescope::runtime::testing
