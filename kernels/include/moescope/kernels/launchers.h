// Every CUDA launcher of the MoE hot path, with raw pointers and a stream (DeepEP style): the
// runtime owns tensors and calls these on their data pointers. Compiles without nvcc; the
// launchers themselves exist only when the library was built with CUDA
// (MOESCOPE_KERNELS_HAVE_CUDA=1), the supports_* queries always.
//
// Pipeline for one MoE layer on one rank (T tokens, E experts, k = top_k, N = T * k
// assignments, R = permuted_row_capacity(N, E, row_alignment), H = hidden):
//
//   logits [T, E] --router_forward--> scores [T, E], topk_ids [T, k], topk_weights [T, k]
//   topk_ids --build_routing_map--> tokens_per_expert [E], group_offsets [E + 1],
//                                   destination_rows [N], row_sources [R]
//   tokens [T, H] --permute_tokens--> permuted [R, H]   (expert-contiguous, padded groups)
//   permuted --grouped GEMM (at::_grouped_mm with offs = group_offsets + 1, or cuBLAS)--> y
//   y [R, H] --unpermute_combine(topk_weights)--> output [T, H]
//
// Conventions:
// - All pointers are device pointers unless the name says host_. Row-major, densely packed.
// - Assignment n = t * k + j is token t's j-th choice. destination_rows[n] is its row in the
//   permuted buffer, -1 when dropped (topk_ids[n] < 0 marks a dropped assignment).
// - row_sources[r] is the assignment stored at permuted row r, -1 for padding rows.
// - Deterministic: no float atomics anywhere; every sum runs in a fixed order, so results are
//   bitwise reproducible for a given launch on a given device.
// - Invalid arguments throw std::invalid_argument naming the argument; a CUDA or cuBLAS error
//   at launch throws std::runtime_error naming the launcher and the error.
#pragma once

#include <cstdint>

#include "moescope/kernels/types.h"

// The CUDA runtime spells cudaStream_t this way too; redeclaring the same alias is legal C++.
struct CUstream_st;
using cudaStream_t = CUstream_st*;
struct cublasContext;  // cublasHandle_t is cublasContext*

namespace moescope::kernels {

/// True when this build of moescope_kernels contains the CUDA launchers.
bool cuda_kernels_built();

// ---------------------------------------------------------------------------------------------
// Fused router: logits -> softmax|sigmoid -> (+expert_bias for selection) -> group limit ->
// top-k -> normalized, scaled weights; optional per-expert selection counts for the aux loss.

/// CUDA path handles: 1 <= num_experts <= 1024, 1 <= top_k <= min(64, num_experts),
/// num_groups divides num_experts, 1 <= group_top_k <= num_groups and
/// top_k <= group_top_k * (num_experts / num_groups).
bool supports_router(const RouterConfig& config);

/// logits [T, E] float32; expert_bias [E] float32 or nullptr.
/// Writes scores [T, E] (softmax/sigmoid of logits, unbiased), topk_ids [T, k] int32 in
/// descending order of selection score (ties: lower expert id first), topk_weights [T, k]
/// float32, and, unless nullptr, selections_per_expert [E] int32 (overwritten, not accumulated).
void launch_router_forward(const float* logits, const float* expert_bias, std::int64_t num_tokens,
                           const RouterConfig& config, float* scores, std::int32_t* topk_ids,
                           float* topk_weights, std::int32_t* selections_per_expert,
                           cudaStream_t stream);

/// Backward of router_forward w.r.t. logits. scores [T, E] and topk_ids [T, k] are the
/// forward outputs; grad_topk_weights [T, k]; grad_scores [T, E] or nullptr (gradient flowing
/// into the scores from e.g. the aux loss). Writes grad_logits [T, E]. The expert bias and the
/// selection itself carry no gradient.
void launch_router_backward(const float* scores, const std::int32_t* topk_ids,
                            const float* grad_topk_weights, const float* grad_scores,
                            std::int64_t num_tokens, const RouterConfig& config, float* grad_logits,
                            cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Routing map: per-expert histogram, padded exclusive scan and each assignment's destination
// row, entirely on the device (no host sync). Order inside an expert group = assignment order.

/// CUDA path handles 1 <= num_experts <= 1024, 1 <= row_alignment <= 1024 and
/// permuted_row_capacity(...) < 2^31.
bool supports_routing_map(std::int64_t num_assignments, int num_experts, int row_alignment);

/// Bytes of device scratch build_routing_map needs (per-chunk counts).
std::size_t routing_map_workspace_bytes(std::int64_t num_assignments, int num_experts);

/// topk_ids [N] int32 (flattened [T, k]); values in [0, E) route, negative values are dropped.
/// Writes tokens_per_expert [E] (unpadded), group_offsets [E + 1] (padded exclusive starts:
/// group e occupies rows [group_offsets[e], group_offsets[e] + tokens_per_expert[e]), padding
/// up to group_offsets[e + 1]; group_offsets + 1 are the int32 cumulative ends
/// at::_grouped_mm calls `offs`), destination_rows [N] and row_sources [row_capacity]
/// (-1 for padding and for rows past group_offsets[E]).
/// row_capacity must be >= permuted_row_capacity(N, E, row_alignment).
void launch_build_routing_map(const std::int32_t* topk_ids, std::int64_t num_assignments,
                              int num_experts, int row_alignment, void* workspace,
                              std::size_t workspace_bytes, std::int32_t* tokens_per_expert,
                              std::int32_t* group_offsets, std::int32_t* destination_rows,
                              std::int32_t* row_sources, std::int64_t row_capacity,
                              cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Permute: gather token rows into expert-contiguous order.

/// CUDA path handles float32 and bf16 with hidden >= 1; rows move in 16-byte vectors when
/// hidden * dtype_size is a multiple of 16 and the pointers are 16-byte aligned, else
/// element by element.
bool supports_permute(DType dtype, std::int64_t hidden, const void* input, const void* output);

/// tokens [T, H]; row_sources [R] from build_routing_map. Writes permuted [R, H]: row r is
/// tokens[row_sources[r] / top_k], or zeros when row_sources[r] < 0. Every row is written.
void launch_permute_tokens(const void* tokens, DType dtype, std::int64_t num_tokens,
                           std::int64_t hidden, int top_k, const std::int32_t* row_sources,
                           std::int64_t row_capacity, void* permuted, cudaStream_t stream);

/// Backward of permute_tokens: grad_tokens[t] = sum over j = 0..k-1 (in that order, float32
/// accumulation) of grad_permuted[destination_rows[t * k + j]], dropped assignments skipped.
/// grad_permuted [R, H]; writes grad_tokens [T, H].
void launch_permute_tokens_backward(const void* grad_permuted, DType dtype, std::int64_t num_tokens,
                                    std::int64_t hidden, int top_k,
                                    const std::int32_t* destination_rows, void* grad_tokens,
                                    cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Unpermute + weighted combine.

/// Same rules as supports_permute.
bool supports_unpermute_combine(DType dtype, std::int64_t hidden, const void* input,
                                const void* output);

/// expert_output [R, H]; topk_weights [T, k] float32 (nullptr = all ones);
/// destination_rows [N]. Writes output [T, H]: output[t] = sum_j w[t, j] *
/// expert_output[destination_rows[t * k + j]], j ascending, float32 accumulation, dropped
/// assignments skipped (a token with all k dropped gets zeros).
void launch_unpermute_combine(const void* expert_output, DType dtype, const float* topk_weights,
                              const std::int32_t* destination_rows, std::int64_t num_tokens,
                              std::int64_t hidden, int top_k, void* output, cudaStream_t stream);

/// Backward of unpermute_combine. grad_output [T, H]; expert_output [R, H] (forward input);
/// Writes grad_expert_output [R, H] (row r = w[src] * grad_output[src / k] for
/// src = row_sources[r] >= 0, zeros otherwise) and grad_topk_weights [T, k] float32
/// (dot(grad_output[t], expert_output[destination_rows[n]]), 0 when dropped; may be nullptr).
void launch_unpermute_combine_backward(const void* grad_output, const void* expert_output,
                                       DType dtype, const float* topk_weights,
                                       const std::int32_t* destination_rows,
                                       const std::int32_t* row_sources, std::int64_t row_capacity,
                                       std::int64_t num_tokens, std::int64_t hidden, int top_k,
                                       void* grad_expert_output, float* grad_topk_weights,
                                       cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// Grouped GEMM through cublasGemmGroupedBatchedEx. cuBLAS takes the per-group sizes in host
// memory, so the caller must have group_offsets on the host (one device-to-host copy); the
// runtime's default bf16 path on sm90 is at::_grouped_mm, which reads offsets on the device.
// Groups span their padded rows [host_group_offsets[g], host_group_offsets[g + 1]), so every
// row below host_group_offsets[G] of the output is written (padding rows are zero inputs).
// Both launchers set the handle's stream to `stream` (cublasSetStream) and copy the pointer
// arrays from pageable host memory, so they cannot be captured into a CUDA graph; every other
// launcher here is capture-safe (kernels and cudaMemsetAsync only).

/// Both the cuBLAS path and at::_grouped_mm need: float32 or bf16, k and n multiples of
/// 16 / dtype_size (16-byte row strides), 16-byte aligned base pointers, group starts
/// multiples of grouped_mm_row_alignment(dtype) (for the transposed weight-gradient read).
bool supports_grouped_gemm(DType dtype, std::int64_t k, std::int64_t n, const void* a,
                           const void* b, const void* c);

/// Bytes of device scratch for the pointer arrays of num_groups groups.
std::size_t grouped_gemm_workspace_bytes(int num_groups);

/// c[rows of g] = a[rows of g] @ op(b[g]) for each group g.
/// a [rows, k]; b [G, k, n] (b_is_n_by_k = false) or [G, n, k] (true, nn.Linear layout);
/// c [rows, n], same dtype as a and b; float32 accumulation. host_group_offsets [G + 1] in
/// host memory. Groups with no rows are skipped.
void launch_grouped_gemm_cublas(cublasContext* handle, const void* a, const void* b, void* c,
                                DType dtype, int num_groups, const std::int32_t* host_group_offsets,
                                std::int64_t k, std::int64_t n, bool b_is_n_by_k, void* workspace,
                                std::size_t workspace_bytes, cudaStream_t stream);

/// Weight gradient of the grouped GEMM: grad_b[g] = a[rows of g]^T @ grad_c[rows of g].
/// a [rows, k]; grad_c [rows, n]; writes grad_b [G, k, n] (groups with no rows get zeros).
void launch_grouped_gemm_weight_grad_cublas(cublasContext* handle, const void* a,
                                            const void* grad_c, void* grad_b, DType dtype,
                                            int num_groups, const std::int32_t* host_group_offsets,
                                            std::int64_t k, std::int64_t n, void* workspace,
                                            std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace moescope::kernels
