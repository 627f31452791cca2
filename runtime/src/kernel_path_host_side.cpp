// The host side of the fused kernel path (cuda_kernel_path.h), the same in every build: the
// router's settings and their saved form, and the tensors around the routing-map kernel. No
// CUDA here, so CPU builds and tests check it.
#include "cuda_kernel_path.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>
#include <numeric>

#include "moescope/kernels/launchers.h"  // the supports_* queries exist in every build
#include "moescope/runtime/host_transfers.h"

namespace moescope::runtime::kernel_path {

// ---- router settings (every build) -------------------------------------------------------------

kernels::RouterConfig router_config(const MoEConfig& config) {
  kernels::RouterConfig router;
  router.num_experts = static_cast<int>(config.num_experts);
  router.top_k = static_cast<int>(config.top_k);
  router.score_function = config.score_function == ScoreFunction::kSoftmax
                              ? kernels::ScoreFunction::kSoftmax
                              : kernels::ScoreFunction::kSigmoid;
  router.num_groups = static_cast<int>(config.num_groups);
  router.group_top_k = static_cast<int>(config.group_top_k);
  router.normalize_top_k = config.normalize_top_k_weights;
  router.scaling_factor = static_cast<float>(config.routed_scaling_factor);
  return router;
}

bool router_covers(const MoEConfig& config) {
  // top_k, num_groups and group_top_k are at most num_experts in a validated config.
  return !config.force_uniform_routing && config.nonfinite_policy == NonFinitePolicy::kError &&
         config.num_experts <= std::numeric_limits<int>::max() &&
         kernels::supports_router(router_config(config));
}

c10::IValue router_config_to_ivalue(const kernels::RouterConfig& config) {
  // One name per field: a field added to RouterConfig makes this binding fail to compile.
  const auto& [num_experts, top_k, score_function, num_groups, group_top_k, normalize_top_k,
               scaling_factor] = config;
  return c10::ivalue::Tuple::create(
      int64_t{num_experts}, int64_t{top_k}, static_cast<int64_t>(score_function),
      int64_t{num_groups}, int64_t{group_top_k}, normalize_top_k,
      static_cast<double>(scaling_factor));  // float -> double -> float is exact
}

kernels::RouterConfig router_config_from_ivalue(const c10::IValue& saved) {
  TORCH_CHECK(saved.isTuple() && saved.toTupleRef().elements().size() == 7,
              "router_config_from_ivalue: expected the 7-tuple of router_config_to_ivalue, got ",
              saved.tagKind());
  // A copy: indexing the tuple's inline storage past 3 elements trips GCC's -Warray-bounds.
  const std::vector<c10::IValue> fields = saved.toTupleRef().elements().vec();
  const int64_t score_function = fields[2].toInt();
  TORCH_CHECK(score_function == static_cast<int64_t>(kernels::ScoreFunction::kSoftmax) ||
                  score_function == static_cast<int64_t>(kernels::ScoreFunction::kSigmoid),
              "router_config_from_ivalue: unknown score function ", score_function);
  kernels::RouterConfig config;
  config.num_experts = static_cast<int>(fields[0].toInt());
  config.top_k = static_cast<int>(fields[1].toInt());
  config.score_function = static_cast<kernels::ScoreFunction>(score_function);
  config.num_groups = static_cast<int>(fields[3].toInt());
  config.group_top_k = static_cast<int>(fields[4].toInt());
  config.normalize_top_k = fields[5].toBool();
  config.scaling_factor = static_cast<float>(fields[6].toDouble());
  return config;
}

// ---- routing map host side (every build) -------------------------------------------------------

at::Tensor routing_map_expert_ids(const at::Tensor& top_k_indices, const at::Tensor& keep_mask) {
  const at::Tensor expert_ids =
      keep_mask.defined() ? at::where(keep_mask, top_k_indices, -1) : top_k_indices;
  return expert_ids.to(at::kInt).flatten().contiguous();
}

DispatchPlan dispatch_plan_from_routing_map(const FusedRoutingMap& map, int64_t num_tokens,
                                            int64_t top_k) {
  constexpr const char* kOp = "kernel_path::dispatch_plan_from_routing_map";
  TORCH_CHECK(map.tokens_per_expert.dim() == 1 && map.tokens_per_expert.scalar_type() == at::kInt,
              kOp, ": tokens_per_expert must be [E] int32");
  TORCH_CHECK(map.destination_rows.dim() == 1 &&
                  map.destination_rows.size(0) == num_tokens * top_k &&
                  map.destination_rows.scalar_type() == at::kInt,
              kOp, ": destination_rows must be [T * K = ", num_tokens * top_k, "] int32, got ",
              map.destination_rows.sizes(), " ", map.destination_rows.scalar_type());
  TORCH_CHECK(map.row_sources.dim() == 1 && map.row_sources.scalar_type() == at::kInt, kOp,
              ": row_sources must be [R] int32");
  DispatchPlan plan;
  plan.num_tokens = num_tokens;
  plan.top_k = top_k;
  plan.tokens_per_expert = map.tokens_per_expert.to(at::kLong);
  plan.rows_per_expert = copy_to_host_int64(plan.tokens_per_expert);
  const int64_t num_rows =
      std::accumulate(plan.rows_per_expert.begin(), plan.rows_per_expert.end(), int64_t{0});
  TORCH_CHECK(num_rows <= map.row_sources.size(0), kOp, ": the counts add up to ", num_rows,
              " rows but row_sources holds ", map.row_sources.size(0));
  plan.row_sources = map.row_sources.narrow(0, 0, num_rows);
  plan.destination_rows = map.destination_rows;
  plan.row_to_assignment = plan.row_sources.to(at::kLong);
  plan.row_to_token = at::div(plan.row_to_assignment, top_k, "floor");
  return plan;
}

}  // namespace moescope::runtime::kernel_path
