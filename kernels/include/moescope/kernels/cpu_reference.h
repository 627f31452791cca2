// CPU references of every MoE kernel: the same signatures as the launchers in launchers.h,
// minus the stream (and the device workspace), on host pointers. Plain loops that read like
// the definition of each op; they are the oracle the CUDA kernels are checked against
// (tests/device/kernels_check.cu) and a fallback for CPU tensors. Shapes and conventions are
// documented on the launchers. Invalid arguments throw std::invalid_argument naming them.
#pragma once

#include <cstdint>

#include "moescope/kernels/types.h"

namespace moescope::kernels::reference {

/// See launch_router_forward. Every RouterConfig the launcher accepts is accepted here too
/// (no size limits).
void router_forward(const float* logits, const float* expert_bias, std::int64_t num_tokens,
                    const RouterConfig& config, float* scores, std::int32_t* topk_ids,
                    float* topk_weights, std::int32_t* selections_per_expert);

/// See launch_router_backward.
void router_backward(const float* scores, const std::int32_t* topk_ids,
                     const float* grad_topk_weights, const float* grad_scores,
                     std::int64_t num_tokens, const RouterConfig& config, float* grad_logits);

/// See launch_build_routing_map.
void build_routing_map(const std::int32_t* topk_ids, std::int64_t num_assignments, int num_experts,
                       int row_alignment, std::int32_t* tokens_per_expert,
                       std::int32_t* group_offsets, std::int32_t* destination_rows,
                       std::int32_t* row_sources, std::int64_t row_capacity);

/// See launch_permute_tokens.
void permute_tokens(const void* tokens, DType dtype, std::int64_t num_tokens, std::int64_t hidden,
                    int top_k, const std::int32_t* row_sources, std::int64_t row_capacity,
                    void* permuted);

/// See launch_permute_tokens_backward.
void permute_tokens_backward(const void* grad_permuted, DType dtype, std::int64_t num_tokens,
                             std::int64_t hidden, int top_k, const std::int32_t* destination_rows,
                             void* grad_tokens);

/// See launch_unpermute_combine.
void unpermute_combine(const void* expert_output, DType dtype, const float* topk_weights,
                       const std::int32_t* destination_rows, std::int64_t num_tokens,
                       std::int64_t hidden, int top_k, void* output);

/// See launch_unpermute_combine_backward.
void unpermute_combine_backward(const void* grad_output, const void* expert_output, DType dtype,
                                const float* topk_weights, const std::int32_t* destination_rows,
                                const std::int32_t* row_sources, std::int64_t row_capacity,
                                std::int64_t num_tokens, std::int64_t hidden, int top_k,
                                void* grad_expert_output, float* grad_topk_weights);

/// See launch_grouped_gemm_cublas (float32 accumulation, output rounded to dtype).
void grouped_gemm(const void* a, const void* b, void* c, DType dtype, int num_groups,
                  const std::int32_t* host_group_offsets, std::int64_t k, std::int64_t n,
                  bool b_is_n_by_k);

/// See launch_grouped_gemm_weight_grad_cublas.
void grouped_gemm_weight_grad(const void* a, const void* grad_c, void* grad_b, DType dtype,
                              int num_groups, const std::int32_t* host_group_offsets,
                              std::int64_t k, std::int64_t n);

}  // namespace moescope::kernels::reference
