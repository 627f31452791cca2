// Token dispatch and combine on one rank: capacity dropping, the permutation of token copies
// into expert-contiguous rows, and the weighted un-permutation back to tokens.
//
// Layout: each token t picks K experts, giving A = T*K assignments numbered a = t*K + k. Kept
// assignments become R rows sorted by expert (stable, so by token inside an expert):
//
//   rows:  [ expert 0: tokens... | expert 1: tokens... | ... | expert E-1: tokens... ]
//           <- counts[0] rows ->   <- counts[1] rows ->
//
// With expert parallelism the experts of one rank are contiguous, so the same order is also
// grouped by destination rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "moescope/runtime/dispatch_buffer_pool.h"
#include "moescope/runtime/moe_config.h"

namespace moescope::runtime {

/// Which assignments survive the capacity limit.
struct CapacityResult {
  at::Tensor keep_mask;     // [T, K] bool, false for dropped assignments
  int64_t num_dropped = 0;  // assignments dropped in this forward
};

/// Applies `capacity` (assignments per expert) with `policy`. `top_k_weights` [T, K] orders
/// assignments for DropPolicy::kByProbability. Costs one host sync (the dropped count).
CapacityResult apply_expert_capacity(const at::Tensor& top_k_indices,
                                     const at::Tensor& top_k_weights, int64_t num_experts,
                                     int64_t capacity, DropPolicy policy);

/// The same with one limit per group: groups [T, K] int64 in [0, G) (experts, destination
/// ranks, ...), capacity [G] int64 assignments each group keeps at most.
CapacityResult apply_group_capacity(const at::Tensor& groups, const at::Tensor& top_k_weights,
                                    const at::Tensor& capacity, DropPolicy policy);

/// Where every row of the expert-contiguous layout comes from.
struct DispatchPlan {
  int64_t num_tokens = 0;                // T
  int64_t top_k = 0;                     // K
  at::Tensor row_to_assignment;          // [R] int64, a = t*K + k of each row
  at::Tensor row_to_token;               // [R] int64, t of each row
  at::Tensor tokens_per_expert;          // [E] int64 rows per expert (kept assignments only)
  std::vector<int64_t> rows_per_expert;  // the same on the host (grouped GEMM, all-to-all splits)
  // Built by the fused CUDA routing map only (undefined on the ATen path); the permute and
  // combine kernels read these instead of row_to_token.
  at::Tensor row_sources;       // [R] int32, row_to_assignment as int32
  at::Tensor destination_rows;  // [T*K] int32 row of each assignment, -1 when dropped
};

/// Builds the plan from top_k_indices [T, K] and an optional keep_mask [T, K] (undefined =
/// keep everything). One host sync for the counts. With `use_fused_kernels` and CUDA indices the
/// fused routing-map kernel (histogram + scan + placement on the device) builds it, filling
/// row_sources/destination_rows too; the rows come out in the same order either way.
DispatchPlan build_dispatch_plan(const at::Tensor& top_k_indices, const at::Tensor& keep_mask,
                                 int64_t num_experts, bool use_fused_kernels = false);

/// Gathers token copies into expert order: hidden [T, H] -> rows [R, H]. Backward scatters the
/// row gradients back with one index_add (custom autograd Function). With a `pool` the rows are
/// written into its buffer `kind` (valid until that buffer's next use: only for rows nothing
/// saves for backward, e.g. an all-to-all's send buffer).
at::Tensor permute_tokens(const at::Tensor& hidden, const at::Tensor& row_to_token,
                          DispatchBufferPool* pool = nullptr,
                          DispatchBufferKind kind = DispatchBufferKind::kDispatchSend);

/// The same for the rows of `plan`: hidden [T, H] -> rows [R, H]. Runs the fused permute kernels
/// (forward gather, backward per-token gather-sum without atomics) when the plan came from the
/// fused routing map and hidden is a float32/bf16 CUDA tensor; otherwise the function above.
at::Tensor permute_tokens(const at::Tensor& hidden, const DispatchPlan& plan,
                          DispatchBufferPool* pool = nullptr,
                          DispatchBufferKind kind = DispatchBufferKind::kDispatchSend);

/// Weighted sum of rows back into tokens: out[t] = sum over rows r of t of w[r] * rows[r].
/// rows [R, H], row_weights [R] (same dtype as rows) -> [num_tokens, H]. Backward gives the
/// gradient of both rows and weights without materialising the weighted rows.
at::Tensor unpermute_tokens(const at::Tensor& rows, const at::Tensor& row_weights,
                            const at::Tensor& row_to_token, int64_t num_tokens);

/// Rows' combine weights from the router's [T, K] weights: [R], cast to `dtype`.
at::Tensor gather_row_weights(const at::Tensor& top_k_weights, const DispatchPlan& plan,
                              at::ScalarType dtype);

/// Combine for `plan`: out[t] = sum over t's kept assignments a of top_k_weights[a] *
/// rows[row of a]. rows [R, H] in plan order, top_k_weights [T, K] (router dtype, autograd)
/// -> [T, H], gradients to rows and top_k_weights. Runs the fused unpermute+combine kernels
/// (float32 weights and accumulation, no atomics) when the plan came from the fused routing
/// map, rows are float32/bf16 on CUDA and the weights float32; otherwise
/// unpermute_tokens(rows, gather_row_weights(top_k_weights, plan, rows dtype), ...).
at::Tensor combine_tokens(const at::Tensor& rows, const at::Tensor& top_k_weights,
                          const DispatchPlan& plan);

}  // namespace moescope::runtime
