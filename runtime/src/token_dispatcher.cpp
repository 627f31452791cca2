#include "moescope/runtime/token_dispatcher.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cuda_kernel_path.h"
#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// rows = hidden[row_to_token]; the backward is a single index_add into a zero [T, H] buffer.
// With a `fused_plan` (from the fused routing map: row_sources [R] and destination_rows [T*K],
// int32) both directions run the permute kernels instead: a gather, and a per-token gather-sum
// in fixed order (no atomics).
struct PermuteTokensFunction : public torch::autograd::Function<PermuteTokensFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& row_to_token, DispatchBufferPool* pool,
                            DispatchBufferKind kind, const DispatchPlan* fused_plan) {
    ctx->saved_data["num_tokens"] = hidden.size(0);
    if (fused_plan != nullptr) {
      ctx->save_for_backward({row_to_token, fused_plan->destination_rows});
      ctx->saved_data["top_k"] = fused_plan->top_k;
      const at::Tensor out =
          pool == nullptr ? at::Tensor() : pool->acquire(kind, fused_plan->row_sources.size(0));
      return kernel_path::permute_tokens(hidden, fused_plan->row_sources, fused_plan->top_k, out);
    }
    ctx->save_for_backward({row_to_token});
    if (pool == nullptr) return hidden.index_select(0, row_to_token);
    at::Tensor rows = pool->acquire(kind, row_to_token.size(0));
    return at::index_select_out(rows, hidden, 0, row_to_token);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& row_to_token = saved[0];
    const at::Tensor& grad_rows = grad_outputs[0];
    const int64_t num_tokens = ctx->saved_data["num_tokens"].toInt();
    at::Tensor grad_hidden;
    if (saved.size() == 2) {  // fused: saved[1] is destination_rows
      grad_hidden = kernel_path::permute_tokens_backward(
          grad_rows.contiguous(), saved[1], num_tokens, ctx->saved_data["top_k"].toInt());
    } else {
      grad_hidden = at::zeros({num_tokens, grad_rows.size(1)}, grad_rows.options());
      grad_hidden.index_add_(0, row_to_token, grad_rows);
    }
    return {grad_hidden, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// out = sum_r w[r] * rows[r] into token row_to_token[r]. Saves rows and weights; the weighted
// rows (an [R, H] temporary in the autograd composition) exist only inside the forward.
struct UnpermuteTokensFunction : public torch::autograd::Function<UnpermuteTokensFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& row_weights, const at::Tensor& row_to_token,
                            int64_t num_tokens) {
    ctx->save_for_backward({rows, row_weights, row_to_token});
    at::Tensor out = at::zeros({num_tokens, rows.size(1)}, rows.options());
    out.index_add_(0, row_to_token, rows * row_weights.unsqueeze(1));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& rows = saved[0];
    const at::Tensor& row_weights = saved[1];
    const at::Tensor& row_to_token = saved[2];
    const at::Tensor grad_tokens_rows = grad_outputs[0].index_select(0, row_to_token);
    at::Tensor grad_rows = grad_tokens_rows * row_weights.unsqueeze(1);
    at::Tensor grad_weights = (grad_tokens_rows * rows).sum(1);
    return {grad_rows, grad_weights, at::Tensor(), at::Tensor()};
  }
};

// out[t] = sum_k w[t, k] * rows[destination_rows[t*K + k]] with the fused unpermute+combine
// kernel (float32 weights and accumulation); its backward gives the rows' and the weights'
// gradients in one kernel. Saves rows and weights, like UnpermuteTokensFunction.
struct CombineTokensFunction : public torch::autograd::Function<CombineTokensFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& top_k_weights, const at::Tensor& destination_rows,
                            const at::Tensor& row_sources) {
    ctx->save_for_backward({rows, top_k_weights, destination_rows, row_sources});
    return kernel_path::unpermute_combine(rows, top_k_weights, destination_rows);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [grad_rows, grad_weights] =
        kernel_path::unpermute_combine_backward(grad_outputs[0].contiguous(), saved[0], saved[1],
                                                saved[2], saved[3], ctx->needs_input_grad(1));
    return {grad_rows, grad_weights, at::Tensor(), at::Tensor()};
  }
};

// True when `plan` came from the fused routing map and the kernels take rows like `like`.
bool fused_rows_apply(const DispatchPlan& plan, const at::Tensor& like) {
  return plan.row_sources.defined() && plan.num_tokens > 0 && plan.row_sources.size(0) > 0 &&
         like.is_cuda() && like.device() == plan.row_sources.device() &&
         kernel_path::rows_apply(like);
}

void check_fits_pool(const at::Tensor& hidden, const DispatchBufferPool* pool) {
  TORCH_CHECK(
      pool == nullptr || (hidden.dim() == 2 && hidden.size(1) == pool->options().hidden_size &&
                          hidden.scalar_type() == pool->options().dtype),
      "permute_tokens: rows ", hidden.sizes(), " ", hidden.scalar_type(),
      " do not fit the dispatch buffer pool's [rows, ", pool ? pool->options().hidden_size : 0,
      "] buffers");
}

}  // namespace

CapacityResult apply_expert_capacity(const at::Tensor& top_k_indices,
                                     const at::Tensor& top_k_weights, int64_t num_experts,
                                     int64_t capacity, DropPolicy policy) {
  TORCH_CHECK(capacity >= 0, "apply_expert_capacity: capacity must be >= 0, got ", capacity);
  return apply_group_capacity(top_k_indices, top_k_weights,
                              at::full({num_experts}, capacity, at::kLong), policy);
}

CapacityResult apply_group_capacity(const at::Tensor& groups, const at::Tensor& top_k_weights,
                                    const at::Tensor& capacity, DropPolicy policy) {
  TORCH_CHECK(groups.sizes() == top_k_weights.sizes(), "apply_group_capacity: groups ",
              groups.sizes(), " and top_k_weights ", top_k_weights.sizes(), " differ in shape");
  TORCH_CHECK(capacity.dim() == 1 && capacity.scalar_type() == at::kLong,
              "apply_group_capacity: capacity must be [G] int64, got ", capacity.sizes(), " ",
              capacity.scalar_type());
  const int64_t num_groups = capacity.size(0);
  const at::Tensor experts = groups.flatten();
  const int64_t num_assignments = experts.numel();
  // Order assignments by group, and inside a group by priority: position (a = t*K + k)
  // for kByPosition, descending weight for kByProbability. Stable sorts keep ties by position.
  at::Tensor order;
  if (policy == DropPolicy::kByProbability) {
    at::Tensor by_weight = std::get<1>(
        at::sort(top_k_weights.detach().flatten(), /*stable=*/true, 0, /*descending=*/true));
    at::Tensor by_expert =
        std::get<1>(at::sort(experts.index_select(0, by_weight), /*stable=*/true, 0, false));
    order = by_weight.index_select(0, by_expert);
  } else {
    order = std::get<1>(at::sort(experts, /*stable=*/true, 0, false));
  }
  at::Tensor counts = at::bincount(experts, {}, num_groups);
  at::Tensor group_starts = counts.cumsum(0) - counts;
  at::Tensor sorted_experts = experts.index_select(0, order);
  at::Tensor rank_in_expert =
      at::arange(num_assignments, experts.options()) - group_starts.index_select(0, sorted_experts);
  at::Tensor keep_sorted =
      rank_in_expert < capacity.to(experts.device()).index_select(0, sorted_experts);
  CapacityResult result;
  result.keep_mask = at::zeros({num_assignments}, experts.options().dtype(at::kBool))
                         .scatter_(0, order, keep_sorted)
                         .view(groups.sizes());
  result.num_dropped = num_assignments - read_scalar(keep_sorted.sum()).to<int64_t>();
  return result;
}

DispatchPlan build_dispatch_plan(const at::Tensor& top_k_indices, const at::Tensor& keep_mask,
                                 int64_t num_experts, bool use_fused_kernels) {
  TORCH_CHECK(top_k_indices.dim() == 2, "build_dispatch_plan: top_k_indices must be [T, K]");
  DispatchPlan plan;
  plan.num_tokens = top_k_indices.size(0);
  plan.top_k = top_k_indices.size(1);
  TORCH_CHECK(!keep_mask.defined() || keep_mask.sizes() == top_k_indices.sizes(),
              "build_dispatch_plan: keep_mask must match top_k_indices in shape");
  if (kernel_path::enabled_for(use_fused_kernels, top_k_indices) &&
      kernel_path::routing_map_applies(top_k_indices.numel(), num_experts)) {
    const kernel_path::FusedRoutingMap map = kernel_path::build_routing_map(
        kernel_path::routing_map_expert_ids(top_k_indices, keep_mask), num_experts);
    return kernel_path::dispatch_plan_from_routing_map(map, plan.num_tokens, plan.top_k);
  }
  at::Tensor experts = top_k_indices.flatten();
  at::Tensor assignments = at::arange(experts.numel(), experts.options());
  if (keep_mask.defined()) {
    at::Tensor kept = keep_mask.flatten().nonzero().squeeze(1);
    experts = experts.index_select(0, kept);
    assignments = kept;
  }
  at::Tensor order = std::get<1>(at::sort(experts, /*stable=*/true, 0, false));
  plan.row_to_assignment = assignments.index_select(0, order);
  plan.row_to_token = at::div(plan.row_to_assignment, plan.top_k, "floor");
  plan.tokens_per_expert = at::bincount(experts, {}, num_experts);
  plan.rows_per_expert = copy_to_host_int64(plan.tokens_per_expert);
  return plan;
}

at::Tensor permute_tokens(const at::Tensor& hidden, const at::Tensor& row_to_token,
                          DispatchBufferPool* pool, DispatchBufferKind kind) {
  check_fits_pool(hidden, pool);
  return PermuteTokensFunction::apply(hidden, row_to_token, pool, kind,
                                      static_cast<const DispatchPlan*>(nullptr));
}

at::Tensor permute_tokens(const at::Tensor& hidden, const DispatchPlan& plan,
                          DispatchBufferPool* pool, DispatchBufferKind kind) {
  if (!fused_rows_apply(plan, hidden)) return permute_tokens(hidden, plan.row_to_token, pool, kind);
  TORCH_CHECK(hidden.size(0) == plan.num_tokens, "permute_tokens: hidden has ", hidden.size(0),
              " tokens but the dispatch plan ", plan.num_tokens);
  check_fits_pool(hidden, pool);
  return PermuteTokensFunction::apply(hidden.contiguous(), plan.row_to_token, pool, kind, &plan);
}

at::Tensor unpermute_tokens(const at::Tensor& rows, const at::Tensor& row_weights,
                            const at::Tensor& row_to_token, int64_t num_tokens) {
  TORCH_CHECK(rows.dim() == 2 && row_weights.dim() == 1 && rows.size(0) == row_weights.size(0),
              "unpermute_tokens: rows ", rows.sizes(), " and row_weights ", row_weights.sizes(),
              " do not match");
  TORCH_CHECK(rows.scalar_type() == row_weights.scalar_type(),
              "unpermute_tokens: rows and row_weights must share a dtype");
  return UnpermuteTokensFunction::apply(rows, row_weights, row_to_token, num_tokens);
}

at::Tensor gather_row_weights(const at::Tensor& top_k_weights, const DispatchPlan& plan,
                              at::ScalarType dtype) {
  return top_k_weights.flatten().index_select(0, plan.row_to_assignment).to(dtype);
}

at::Tensor combine_tokens(const at::Tensor& rows, const at::Tensor& top_k_weights,
                          const DispatchPlan& plan) {
  TORCH_CHECK(top_k_weights.dim() == 2 && top_k_weights.size(0) == plan.num_tokens &&
                  top_k_weights.size(1) == plan.top_k,
              "combine_tokens: top_k_weights ", top_k_weights.sizes(), " do not match the plan's [",
              plan.num_tokens, ", ", plan.top_k, "]");
  TORCH_CHECK(rows.dim() == 2 && rows.size(0) == plan.row_to_token.size(0), "combine_tokens: rows ",
              rows.sizes(), " do not match the plan's ", plan.row_to_token.size(0), " rows");
  if (fused_rows_apply(plan, rows) && top_k_weights.scalar_type() == at::kFloat &&
      top_k_weights.device() == rows.device()) {
    return CombineTokensFunction::apply(rows.contiguous(), top_k_weights.contiguous(),
                                        plan.destination_rows, plan.row_sources);
  }
  return unpermute_tokens(rows, gather_row_weights(top_k_weights, plan, rows.scalar_type()),
                          plan.row_to_token, plan.num_tokens);
}

}  // namespace moescope::runtime
