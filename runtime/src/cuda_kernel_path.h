// The runtime's bridge to moescope_kernels' CUDA launchers (MoEConfig.use_fused_kernels).
// Private to the runtime: torch types stop here. Each function takes CUDA tensors, checks their
// shapes and dtypes with TORCH_CHECK naming the tensor, and calls one launcher on the tensors'
// device and current CUDA stream. Callers ask the matching *_applies() query first and run
// their ATen code when it is false, so an unsupported size, dtype or device never fails.
//
// The runtime's expert rows are unpadded (row_alignment 1): the kernels' routing map with
// alignment 1 gives exactly the order of build_dispatch_plan's stable sort by expert, so
//   row_sources[r]      = row_to_assignment[r]   (int32, assignment a = t * K + k of row r)
//   destination_rows[a] = row of assignment a, -1 when capacity dropped it
// and the permute/combine kernels read those instead of row_to_token.
//
// Built without the CUDA kernels (MOESCOPE_RUNTIME_FUSED_KERNELS unset: moescope_kernels or
// LibTorch without CUDA) built() is false, every *_applies() is false and the launch functions
// throw. router_config(), router_covers() and the router config's saved form take no tensors,
// and routing_map_expert_ids() and dispatch_plan_from_routing_map() (the host side around the
// routing-map kernel) take tensors on any device: they are the same in every build, so CPU tests
// check them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "moescope/kernels/types.h"
#include "moescope/runtime/moe_config.h"
#include "moescope/runtime/token_dispatcher.h"

namespace moescope::runtime::kernel_path {

/// True when this runtime was built with moescope_kernels' CUDA launchers.
bool built();

/// The precondition every fused op shares: the flag is on, the launchers are built and
/// `tensor` lives on a CUDA device.
bool enabled_for(bool use_fused_kernels, const at::Tensor& tensor);

// ---- router ------------------------------------------------------------------------------------

/// The fused router's settings for `config` (validated, router_covers(config) true, so every
/// count fits an int). routed_scaling_factor becomes a float: the ATen path multiplies fp32
/// weights by it, which rounds it to float too.
kernels::RouterConfig router_config(const MoEConfig& config);

/// True when the fused router computes what the ATen router computes for `config`, whatever the
/// tensors: kernels::supports_router(router_config(config)), and neither forced uniform routing
/// (selection is bypassed) nor NonFinitePolicy::kDontCheck (the kernel ranks NaN lowest where
/// at::topk ranks it highest; under kError NaN/Inf logits have thrown before routing). Routing
/// replay, the logits' dtype and device are the caller's and router_applies()'s to check.
bool router_covers(const MoEConfig& config);

/// `config` as one IValue for an autograd context's saved_data (so the fused router's backward
/// runs with exactly the forward's settings), and back: router_config_from_ivalue gives every
/// field router_config_to_ivalue saved. A field added to kernels::RouterConfig stops
/// router_config_to_ivalue from compiling until it is saved too.
c10::IValue router_config_to_ivalue(const kernels::RouterConfig& config);
kernels::RouterConfig router_config_from_ivalue(const c10::IValue& saved);

/// True when router_forward handles `logits` [T, E] float32 with `config` (supports_router).
bool router_applies(const kernels::RouterConfig& config, const at::Tensor& logits);

struct FusedRouterOutputs {
  at::Tensor scores;                 // [T, E] float32, softmax/sigmoid of the logits
  at::Tensor top_k_ids;              // [T, K] int32, descending selection score
  at::Tensor top_k_weights;          // [T, K] float32 (normalised and scaled)
  at::Tensor selections_per_expert;  // [E] int32
};

/// launch_router_forward. logits [T, E] float32; expert_bias [E] float32 or undefined.
FusedRouterOutputs router_forward(const at::Tensor& logits, const at::Tensor& expert_bias,
                                  const kernels::RouterConfig& config);

/// launch_router_backward: grad_logits [T, E] from the forward's scores [T, E] and top_k_ids
/// [T, K], grad_top_k_weights [T, K] and grad_scores [T, E] (undefined = none).
at::Tensor router_backward(const at::Tensor& scores, const at::Tensor& top_k_ids,
                           const at::Tensor& grad_top_k_weights, const at::Tensor& grad_scores,
                           const kernels::RouterConfig& config);

// ---- routing map -------------------------------------------------------------------------------

/// True when build_routing_map handles num_assignments > 0 assignments over num_experts.
bool routing_map_applies(int64_t num_assignments, int64_t num_experts);

struct FusedRoutingMap {
  at::Tensor tokens_per_expert;  // [E] int32 kept assignments per expert
  at::Tensor destination_rows;   // [N] int32 row of each assignment, -1 when dropped
  at::Tensor row_sources;        // [N] int32 assignment of each row, -1 past the kept rows
};

/// build_routing_map's input for top_k_indices [T, K] (integer) and keep_mask [T, K] bool
/// (undefined = keep everything): expert_ids [T * K] int32 contiguous, the expert of assignment
/// a = t * K + k, or -1 where keep_mask drops it (the kernel skips negative ids). Any device.
at::Tensor routing_map_expert_ids(const at::Tensor& top_k_indices, const at::Tensor& keep_mask);

/// launch_build_routing_map with row_alignment 1. expert_ids [N] int32 CUDA, negative =
/// dropped.
FusedRoutingMap build_routing_map(const at::Tensor& expert_ids, int64_t num_experts);

/// The dispatch plan of `map`, a routing map with row_alignment 1 of num_tokens * top_k
/// assignments: tokens_per_expert and rows_per_expert from the map's counts (one host sync),
/// row_sources = the map's first R rows (R = kept assignments), destination_rows = the map's,
/// row_to_assignment and row_to_token from row_sources. Equal to build_dispatch_plan's ATen plan
/// in every field both fill. Any device (CPU tests feed it the kernel's CPU reference).
DispatchPlan dispatch_plan_from_routing_map(const FusedRoutingMap& map, int64_t num_tokens,
                                            int64_t top_k);

// ---- permute / unpermute + combine ------------------------------------------------------------

/// True when the permute and combine kernels handle rows of `like`'s dtype and width
/// (float32 or bf16, [*, H]).
bool rows_apply(const at::Tensor& like);

/// launch_permute_tokens: rows[r] = tokens[row_sources[r] / top_k]. tokens [T, H];
/// row_sources [R] int32 (no -1 here); `out` [R, H] contiguous or undefined (allocated).
at::Tensor permute_tokens(const at::Tensor& tokens, const at::Tensor& row_sources, int64_t top_k,
                          at::Tensor out);

/// launch_permute_tokens_backward: grad_tokens [T, H] = sum over t's kept assignments of
/// grad_rows [R, H] at destination_rows [T * K].
at::Tensor permute_tokens_backward(const at::Tensor& grad_rows, const at::Tensor& destination_rows,
                                   int64_t num_tokens, int64_t top_k);

/// launch_unpermute_combine: out [T, H] = sum_k w[t, k] * rows[destination_rows[t * K + k]].
/// rows [R, H]; top_k_weights [T, K] float32; destination_rows [T * K] int32.
at::Tensor unpermute_combine(const at::Tensor& rows, const at::Tensor& top_k_weights,
                             const at::Tensor& destination_rows);

/// launch_unpermute_combine_backward: {grad_rows [R, H], grad_top_k_weights [T, K] float32
/// (undefined unless need_weight_grad)}. row_sources [R] int32.
std::pair<at::Tensor, at::Tensor> unpermute_combine_backward(
    const at::Tensor& grad_output, const at::Tensor& rows, const at::Tensor& top_k_weights,
    const at::Tensor& destination_rows, const at::Tensor& row_sources, bool need_weight_grad);

// ---- grouped GEMM (cuBLAS) ---------------------------------------------------------------------

/// True when grouped_gemm handles a [R > 0, K] @ b[g] with b [G, K, N] contiguous or the
/// transpose of a contiguous [G, N, K] (supports_grouped_gemm: float32/bf16, K and N multiples
/// of 16 bytes, 16-byte aligned a and b; the output is a fresh caching-allocator block).
bool grouped_gemm_applies(const at::Tensor& a, const at::Tensor& b);

/// launch_grouped_gemm_cublas: [R, N], rows of group g times b[g]. Host group sizes.
at::Tensor grouped_gemm(const at::Tensor& a, const at::Tensor& b,
                        const std::vector<int64_t>& rows_per_group);

/// True when grouped_gemm_weight_grad handles a [R > 0, K] and d [R, N].
bool grouped_gemm_weight_grad_applies(const at::Tensor& a, const at::Tensor& d);

/// launch_grouped_gemm_weight_grad_cublas: [G, K, N], a[rows of g]^T @ d[rows of g] (zeros for
/// groups without rows).
at::Tensor grouped_gemm_weight_grad(const at::Tensor& a, const at::Tensor& d,
                                    const std::vector<int64_t>& rows_per_group);

}  // namespace moescope::runtime::kernel_path
