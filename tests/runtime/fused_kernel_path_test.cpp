// MoEConfig.use_fused_kernels on CPU machines: the flag, the CPU layer staying on ATen, and the
// conventions the CUDA path relies on, checked against moescope_kernels' CPU references (the
// oracle the CUDA kernels are checked against on the GPU): the routing map with row alignment 1
// gives the dispatch plan's row order, the permute and unpermute+combine references compute
// what permute_tokens/unpermute_tokens compute (forward and backward), and the fused router's
// definition matches the runtime Router's forward and backward, with the RouterConfig the runtime
// hands the kernel (kernel_path::router_config, the production mapping, not a copy). The host
// side around the kernels is production code too: the routing map's input
// (routing_map_expert_ids), the map -> DispatchPlan conversion (dispatch_plan_from_routing_map,
// fed the kernel's CPU reference map) and the router settings the fused backward reads back. No
// GPU result is simulated here: the CUDA path itself runs in
// tests/device/moe_layer_device_check.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cuda_kernel_path.h"
#include "moe_reference.h"
#include "moescope/kernels/cpu_reference.h"
#include "moescope/kernels/launchers.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/runtime/token_dispatcher.h"

namespace moescope::runtime {
namespace {

namespace ref = moescope::kernels::reference;
using testing::max_abs_diff;
using testing::small_config;

std::vector<int32_t> to_int32_vector(const at::Tensor& tensor) {
  const at::Tensor contiguous = tensor.to(at::kInt).contiguous();
  return {contiguous.data_ptr<int32_t>(), contiguous.data_ptr<int32_t>() + contiguous.numel()};
}

at::Tensor int32_tensor(const std::vector<int32_t>& values) {
  return at::tensor(values, at::kInt);
}

TEST(FusedKernelFlag, DefaultsOnAndReachesTheLayerAndExperts) {
  MoEConfig config = small_config();
  EXPECT_TRUE(config.use_fused_kernels);
  config.num_shared_experts = 1;
  for (const bool use_fused_kernels : {true, false}) {
    config.use_fused_kernels = use_fused_kernels;
    EXPECT_NO_THROW(validate_moe_config(config));
    MoELayer layer(config);
    EXPECT_EQ(layer->config().use_fused_kernels, use_fused_kernels);
    EXPECT_EQ(layer->router->config().use_fused_kernels, use_fused_kernels);
    EXPECT_EQ(layer->experts->use_fused_kernels, use_fused_kernels);
    EXPECT_EQ(layer->shared_experts->use_fused_kernels, use_fused_kernels);
  }
}

// Output, aux loss, loads and every gradient of one forward+backward of `config` on CPU.
std::vector<at::Tensor> cpu_forward_backward(const MoEConfig& config) {
  torch::manual_seed(5);
  MoELayer layer(config);
  if (config.enable_expert_bias) {
    at::NoGradGuard no_grad;
    layer->router->expert_bias.copy_(at::randn({config.num_experts}) * 0.1);
  }
  const at::Tensor input = at::randn({2, 24, 16}).requires_grad_(true);
  const at::Tensor out_grad = at::randn({2, 24, 16});
  MoEOutput out = layer->forward(input);
  ((out.output * out_grad).sum() + out.aux_loss).backward();
  return {out.output.detach(),
          out.aux_loss.detach(),
          out.tokens_per_expert,
          at::tensor(out.num_dropped),
          input.grad(),
          layer->router->gate_weight.grad(),
          layer->experts->w_gate_up.grad(),
          layer->experts->w_down.grad()};
}

// CPU tensors never take the kernel path: with the flag on, forward and backward are bitwise the
// ATen path's, for a router of every kind the fused router covers.
TEST(FusedKernelFlag, CpuLayerIsBitwiseIdenticalWithFlagOnAndOff) {
  MoEConfig softmax = small_config(16, 24, 8, 2);
  softmax.capacity_factor = 1.0;
  softmax.aux_loss_coeff = 1e-2;
  softmax.z_loss_coeff = 1e-3;
  softmax.num_shared_experts = 1;
  MoEConfig sigmoid = small_config(16, 24, 8, 3);
  sigmoid.score_function = ScoreFunction::kSigmoid;
  sigmoid.num_groups = 4;
  sigmoid.group_top_k = 2;
  sigmoid.normalize_top_k_weights = true;
  sigmoid.routed_scaling_factor = 2.5;
  sigmoid.enable_expert_bias = true;
  sigmoid.aux_loss_coeff = 1e-2;
  for (MoEConfig config : {softmax, sigmoid}) {
    SCOPED_TRACE(config.score_function == ScoreFunction::kSoftmax ? "softmax" : "sigmoid");
    config.use_fused_kernels = false;
    const std::vector<at::Tensor> aten = cpu_forward_backward(config);
    if (config.capacity_factor > 0) {
      EXPECT_GT(aten[3].item<int64_t>(), 0);  // capacity dropped assignments
    }
    config.use_fused_kernels = true;
    const std::vector<at::Tensor> flagged = cpu_forward_backward(config);
    ASSERT_EQ(aten.size(), flagged.size());
    for (size_t i = 0; i < aten.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_TRUE(at::equal(aten[i], flagged[i]));
    }
  }
}

TEST(FusedKernelFlag, CpuDispatchPlanCarriesNoKernelIndices) {
  torch::manual_seed(2);
  const at::Tensor indices = at::randint(0, 6, {10, 2}, at::kLong);
  const at::Tensor keep = at::rand({10, 2}) > 0.3;
  const DispatchPlan fused = build_dispatch_plan(indices, keep, 6, /*use_fused_kernels=*/true);
  const DispatchPlan aten = build_dispatch_plan(indices, keep, 6, /*use_fused_kernels=*/false);
  EXPECT_FALSE(fused.row_sources.defined());
  EXPECT_FALSE(fused.destination_rows.defined());
  EXPECT_TRUE(at::equal(fused.row_to_assignment, aten.row_to_assignment));
  EXPECT_EQ(fused.rows_per_expert, aten.rows_per_expert);
}

// What kernel_path::build_routing_map returns, computed by the kernel's CPU reference from the
// same input: expert_ids [N] int32 (negative = dropped), row alignment 1, row capacity N.
kernel_path::FusedRoutingMap reference_routing_map(const at::Tensor& expert_ids, int64_t experts) {
  const std::vector<int32_t> ids = to_int32_vector(expert_ids);
  const int64_t assignments = static_cast<int64_t>(ids.size());
  std::vector<int32_t> tokens_per_expert(experts), group_offsets(experts + 1);
  std::vector<int32_t> destination_rows(assignments), row_sources(assignments);
  ref::build_routing_map(ids.data(), assignments, static_cast<int>(experts), /*row_alignment=*/1,
                         tokens_per_expert.data(), group_offsets.data(), destination_rows.data(),
                         row_sources.data(), assignments);
  return {int32_tensor(tokens_per_expert), int32_tensor(destination_rows),
          int32_tensor(row_sources)};
}

// The routing map's input: the expert of each assignment a = t*K + k, -1 where dropped.
TEST(FusedRoutingMapPlan, ExpertIdsAreTheFlatIndicesWithDroppedAsMinusOne) {
  const at::Tensor indices = at::tensor({2, 0, 1, 3, 4, 4}, at::kLong).view({3, 2});
  const at::Tensor keep = at::tensor({1, 0, 1, 1, 0, 1}, at::kInt).view({3, 2}).to(at::kBool);
  const at::Tensor dropped = kernel_path::routing_map_expert_ids(indices, keep);
  EXPECT_EQ(dropped.scalar_type(), at::kInt);
  EXPECT_EQ(to_int32_vector(dropped), (std::vector<int32_t>{2, -1, 1, 3, -1, 4}));
  const at::Tensor all = kernel_path::routing_map_expert_ids(indices, at::Tensor());
  EXPECT_EQ(all.scalar_type(), at::kInt);
  EXPECT_EQ(to_int32_vector(all), (std::vector<int32_t>{2, 0, 1, 3, 4, 4}));
}

// The routing map the CUDA path builds (row alignment 1) has the dispatch plan's rows: same
// counts, row r holds assignment row_to_assignment[r], dropped assignments have no row.
TEST(FusedKernelConventions, RoutingMapWithAlignmentOneIsTheDispatchPlan) {
  torch::manual_seed(4);
  const int64_t tokens = 37, top_k = 3, experts = 7;
  const at::Tensor indices = at::randint(0, experts, {tokens, top_k}, at::kLong);
  const at::Tensor keep = at::rand({tokens, top_k}) > 0.25;
  const DispatchPlan plan = build_dispatch_plan(indices, keep, experts);
  const int64_t assignments = tokens * top_k;
  const kernel_path::FusedRoutingMap map =
      reference_routing_map(kernel_path::routing_map_expert_ids(indices, keep), experts);
  const std::vector<int32_t> destination_rows = to_int32_vector(map.destination_rows);
  const std::vector<int32_t> row_sources = to_int32_vector(map.row_sources);
  const int64_t rows = plan.row_to_assignment.size(0);
  EXPECT_LT(rows, assignments);  // some assignments were dropped
  EXPECT_TRUE(at::equal(map.tokens_per_expert.to(at::kLong), plan.tokens_per_expert));
  EXPECT_TRUE(at::equal(map.row_sources.narrow(0, 0, rows).to(at::kLong), plan.row_to_assignment));
  for (int64_t r = rows; r < assignments; ++r) EXPECT_EQ(row_sources[r], -1) << "row " << r;
  const at::Tensor kept = keep.flatten();
  for (int64_t a = 0; a < assignments; ++a) {
    if (!kept[a].item<bool>()) {
      EXPECT_EQ(destination_rows[a], -1) << "assignment " << a;
    } else {
      ASSERT_GE(destination_rows[a], 0) << "assignment " << a;
      EXPECT_EQ(plan.row_to_assignment[destination_rows[a]].item<int64_t>(), a);
    }
  }
}

// One routing of the plan tests below: top_k_indices [T, K] int64 and keep_mask [T, K] bool
// (undefined = keep everything).
struct Routing {
  const char* name;
  at::Tensor indices;
  at::Tensor keep;
  int64_t experts;
};

std::vector<Routing> dispatch_routings() {
  torch::manual_seed(5);
  std::vector<Routing> routings;
  routings.push_back(
      {"top_k 3, drops", at::randint(0, 7, {37, 3}, at::kLong), at::rand({37, 3}) > 0.25, 7});
  routings.push_back(
      {"top_k 1, no keep mask", at::randint(0, 5, {23, 1}, at::kLong), at::Tensor(), 5});
  routings.push_back(
      {"top_k 1, drops", at::randint(0, 6, {29, 1}, at::kLong), at::rand({29, 1}) > 0.4, 6});
  // Only even experts chosen: experts 1, 3, 5, 7 and 8 get no rows (8 is past the last used).
  routings.push_back({"top_k 2, empty experts, drops", at::randint(0, 4, {30, 2}, at::kLong) * 2,
                      at::rand({30, 2}) > 0.3, 9});
  // All of expert 0's assignments dropped by the mask (an expert emptied by drops).
  const at::Tensor indices = at::randint(0, 4, {25, 3}, at::kLong);
  routings.push_back({"top_k 3, expert 0 fully dropped", indices, indices != 0, 4});
  routings.push_back({"top_k 2, everything dropped", at::randint(0, 3, {6, 2}, at::kLong),
                      at::zeros({6, 2}, at::kBool), 3});
  return routings;
}

// The fused path's plan is the ATen path's plan: dispatch_plan_from_routing_map of the kernel's
// (reference) routing map gives build_dispatch_plan's fields exactly, and the kernel's indices
// consistent with them (row_sources = row_to_assignment as int32, destination_rows its inverse).
TEST(FusedRoutingMapPlan, PlanFromRoutingMapIsTheAtenDispatchPlan) {
  for (const Routing& routing : dispatch_routings()) {
    SCOPED_TRACE(routing.name);
    const int64_t tokens = routing.indices.size(0), top_k = routing.indices.size(1);
    const DispatchPlan aten = build_dispatch_plan(routing.indices, routing.keep, routing.experts,
                                                  /*use_fused_kernels=*/false);
    const kernel_path::FusedRoutingMap map = reference_routing_map(
        kernel_path::routing_map_expert_ids(routing.indices, routing.keep), routing.experts);
    const DispatchPlan fused = kernel_path::dispatch_plan_from_routing_map(map, tokens, top_k);

    EXPECT_EQ(fused.num_tokens, aten.num_tokens);
    EXPECT_EQ(fused.top_k, aten.top_k);
    for (const auto& [name, fused_field, aten_field] :
         {std::tuple{"row_to_assignment", fused.row_to_assignment, aten.row_to_assignment},
          std::tuple{"row_to_token", fused.row_to_token, aten.row_to_token},
          std::tuple{"tokens_per_expert", fused.tokens_per_expert, aten.tokens_per_expert}}) {
      SCOPED_TRACE(name);
      EXPECT_EQ(fused_field.scalar_type(), at::kLong);
      EXPECT_EQ(fused_field.scalar_type(), aten_field.scalar_type());
      EXPECT_EQ(fused_field.sizes(), aten_field.sizes());
      EXPECT_TRUE(at::equal(fused_field, aten_field));
    }
    EXPECT_EQ(fused.rows_per_expert, aten.rows_per_expert);

    // The ATen plan has no kernel indices; the fused plan's follow from its rows.
    EXPECT_FALSE(aten.row_sources.defined());
    EXPECT_FALSE(aten.destination_rows.defined());
    ASSERT_TRUE(fused.row_sources.defined());
    ASSERT_TRUE(fused.destination_rows.defined());
    EXPECT_EQ(fused.row_sources.scalar_type(), at::kInt);
    EXPECT_TRUE(at::equal(fused.row_sources, aten.row_to_assignment.to(at::kInt)));
    const at::Tensor expected_destination_rows =
        at::full({tokens * top_k}, -1, at::kInt)
            .scatter_(0, aten.row_to_assignment,
                      at::arange(aten.row_to_assignment.size(0), at::kInt));
    EXPECT_EQ(fused.destination_rows.scalar_type(), at::kInt);
    EXPECT_TRUE(at::equal(fused.destination_rows, expected_destination_rows));
  }
}

// A map that does not fit the plan's [T * K] assignments is refused, naming the tensor.
TEST(FusedRoutingMapPlan, RefusesAMapOfAnotherSize) {
  const at::Tensor indices = at::randint(0, 4, {5, 2}, at::kLong);
  const kernel_path::FusedRoutingMap map =
      reference_routing_map(kernel_path::routing_map_expert_ids(indices, at::Tensor()), 4);
  EXPECT_THROW(kernel_path::dispatch_plan_from_routing_map(map, 5, 3), c10::Error);
  EXPECT_THROW(kernel_path::dispatch_plan_from_routing_map(map, 6, 2), c10::Error);
}

struct PlanIndices {
  DispatchPlan plan;
  std::vector<int32_t> destination_rows;  // [T*K]
  std::vector<int32_t> row_sources;       // [R]
};

PlanIndices plan_with_kernel_indices(int64_t tokens, int64_t top_k, int64_t experts) {
  const at::Tensor indices = at::randint(0, experts, {tokens, top_k}, at::kLong);
  const at::Tensor keep = at::rand({tokens, top_k}) > 0.2;
  PlanIndices result;
  result.plan = build_dispatch_plan(indices, keep, experts);
  const int64_t assignments = tokens * top_k;
  result.destination_rows.assign(assignments, -1);
  const std::vector<int32_t> sources = to_int32_vector(result.plan.row_to_assignment);
  for (size_t r = 0; r < sources.size(); ++r) {
    result.destination_rows[sources[r]] = static_cast<int32_t>(r);
  }
  result.row_sources = sources;
  return result;
}

TEST(FusedKernelConventions, PermuteReferenceIsPermuteTokens) {
  torch::manual_seed(6);
  const int64_t tokens = 21, top_k = 2, experts = 5, hidden = 12;
  const PlanIndices p = plan_with_kernel_indices(tokens, top_k, experts);
  const int64_t rows = static_cast<int64_t>(p.row_sources.size());
  const at::Tensor hidden_states = at::randn({tokens, hidden}).requires_grad_(true);
  const at::Tensor grad_rows = at::randn({rows, hidden});
  const at::Tensor runtime_rows = permute_tokens(hidden_states, p.plan.row_to_token);
  (runtime_rows * grad_rows).sum().backward();

  at::Tensor reference_rows = at::empty({rows, hidden});
  const at::Tensor tokens_contiguous = hidden_states.detach().contiguous();
  ref::permute_tokens(tokens_contiguous.data_ptr(), kernels::DType::kFloat32, tokens, hidden,
                      static_cast<int>(top_k), p.row_sources.data(), rows,
                      reference_rows.data_ptr());
  EXPECT_TRUE(at::equal(reference_rows, runtime_rows.detach()));
  at::Tensor reference_grad = at::empty({tokens, hidden});
  ref::permute_tokens_backward(grad_rows.data_ptr(), kernels::DType::kFloat32, tokens, hidden,
                               static_cast<int>(top_k), p.destination_rows.data(),
                               reference_grad.data_ptr());
  EXPECT_LT(max_abs_diff(reference_grad, hidden_states.grad()), 1e-6);
}

// The fused combine takes the router's [T, K] float32 weights where the ATen path takes [R]
// row weights: both give the same output, and the same gradients for rows and [T, K] weights.
TEST(FusedKernelConventions, CombineReferenceIsUnpermuteTokens) {
  torch::manual_seed(7);
  const int64_t tokens = 19, top_k = 3, experts = 6, hidden = 10;
  const PlanIndices p = plan_with_kernel_indices(tokens, top_k, experts);
  const int64_t rows = static_cast<int64_t>(p.row_sources.size());
  const at::Tensor expert_rows = at::randn({rows, hidden}).requires_grad_(true);
  const at::Tensor top_k_weights = at::rand({tokens, top_k}).requires_grad_(true);
  const at::Tensor grad_output = at::randn({tokens, hidden});
  const at::Tensor runtime_output =
      unpermute_tokens(expert_rows, gather_row_weights(top_k_weights, p.plan, at::kFloat),
                       p.plan.row_to_token, tokens);
  (runtime_output * grad_output).sum().backward();
  // combine_tokens is the same ATen composition on CPU.
  EXPECT_TRUE(at::equal(combine_tokens(expert_rows, top_k_weights, p.plan), runtime_output));

  const at::Tensor rows_contiguous = expert_rows.detach().contiguous();
  const at::Tensor weights_contiguous = top_k_weights.detach().contiguous();
  at::Tensor reference_output = at::empty({tokens, hidden});
  ref::unpermute_combine(rows_contiguous.data_ptr(), kernels::DType::kFloat32,
                         weights_contiguous.data_ptr<float>(), p.destination_rows.data(), tokens,
                         hidden, static_cast<int>(top_k), reference_output.data_ptr());
  EXPECT_LT(max_abs_diff(reference_output, runtime_output.detach()), 1e-6);

  at::Tensor reference_grad_rows = at::empty({rows, hidden});
  at::Tensor reference_grad_weights = at::empty({tokens, top_k});
  ref::unpermute_combine_backward(grad_output.data_ptr(), rows_contiguous.data_ptr(),
                                  kernels::DType::kFloat32, weights_contiguous.data_ptr<float>(),
                                  p.destination_rows.data(), p.row_sources.data(), rows, tokens,
                                  hidden, static_cast<int>(top_k), reference_grad_rows.data_ptr(),
                                  reference_grad_weights.data_ptr<float>());
  EXPECT_LT(max_abs_diff(reference_grad_rows, expert_rows.grad()), 1e-6);
  EXPECT_LT(max_abs_diff(reference_grad_weights, top_k_weights.grad()), 1e-5);
}

// The router configs the fused router covers, one of each kind: softmax without normalisation,
// sigmoid with groups, bias, normalisation and a scaling factor, softmax with groups and
// normalisation.
std::vector<MoEConfig> fused_router_configs() {
  MoEConfig softmax = small_config(16, 24, 8, 2);
  MoEConfig sigmoid = small_config(16, 24, 16, 4);
  sigmoid.score_function = ScoreFunction::kSigmoid;
  sigmoid.num_groups = 4;
  sigmoid.group_top_k = 2;
  sigmoid.normalize_top_k_weights = true;
  sigmoid.routed_scaling_factor = 2.5;
  sigmoid.enable_expert_bias = true;
  MoEConfig softmax_normalized = small_config(16, 24, 8, 3);
  softmax_normalized.normalize_top_k_weights = true;
  softmax_normalized.num_groups = 2;
  softmax_normalized.group_top_k = 1;
  softmax_normalized.routed_scaling_factor = 0.1;  // not a float: rounded like the ATen path
  return {softmax, sigmoid, softmax_normalized};
}

// Every field of the kernel's RouterConfig comes from the MoEConfig, none from its defaults
// (kernels::RouterConfig defaults to normalize_top_k = true, the MoEConfig to false).
TEST(FusedRouterConfig, MapsEveryFieldOfTheMoEConfig) {
  const std::vector<MoEConfig> configs = fused_router_configs();
  const kernels::RouterConfig softmax = kernel_path::router_config(configs[0]);
  EXPECT_EQ(softmax.num_experts, 8);
  EXPECT_EQ(softmax.top_k, 2);
  EXPECT_EQ(softmax.score_function, kernels::ScoreFunction::kSoftmax);
  EXPECT_EQ(softmax.num_groups, 1);
  EXPECT_EQ(softmax.group_top_k, 1);
  EXPECT_FALSE(softmax.normalize_top_k);
  EXPECT_EQ(softmax.scaling_factor, 1.0f);

  const kernels::RouterConfig sigmoid = kernel_path::router_config(configs[1]);
  EXPECT_EQ(sigmoid.num_experts, 16);
  EXPECT_EQ(sigmoid.top_k, 4);
  EXPECT_EQ(sigmoid.score_function, kernels::ScoreFunction::kSigmoid);
  EXPECT_EQ(sigmoid.num_groups, 4);
  EXPECT_EQ(sigmoid.group_top_k, 2);
  EXPECT_TRUE(sigmoid.normalize_top_k);
  EXPECT_EQ(sigmoid.scaling_factor, 2.5f);

  const kernels::RouterConfig softmax_normalized = kernel_path::router_config(configs[2]);
  EXPECT_EQ(softmax_normalized.num_experts, 8);
  EXPECT_EQ(softmax_normalized.top_k, 3);
  EXPECT_EQ(softmax_normalized.score_function, kernels::ScoreFunction::kSoftmax);
  EXPECT_EQ(softmax_normalized.num_groups, 2);
  EXPECT_EQ(softmax_normalized.group_top_k, 1);
  EXPECT_TRUE(softmax_normalized.normalize_top_k);
  EXPECT_EQ(softmax_normalized.scaling_factor, static_cast<float>(0.1));
}

void expect_same_router_config(const kernels::RouterConfig& actual,
                               const kernels::RouterConfig& expected) {
  // One name per field, as in router_config_to_ivalue: a new field stops this from compiling.
  const auto& [num_experts, top_k, score_function, num_groups, group_top_k, normalize_top_k,
               scaling_factor] = actual;
  EXPECT_EQ(num_experts, expected.num_experts);
  EXPECT_EQ(top_k, expected.top_k);
  EXPECT_EQ(score_function, expected.score_function);
  EXPECT_EQ(num_groups, expected.num_groups);
  EXPECT_EQ(group_top_k, expected.group_top_k);
  EXPECT_EQ(normalize_top_k, expected.normalize_top_k);
  EXPECT_EQ(scaling_factor, expected.scaling_factor);
}

// The fused router's backward reads back the forward's RouterConfig from saved_data: every field
// survives, each config below differing from the kernels' defaults in other fields.
TEST(FusedRouterConfig, SavedFormGivesBackEveryField) {
  std::vector<kernels::RouterConfig> configs;
  for (const MoEConfig& config : fused_router_configs()) {
    configs.push_back(kernel_path::router_config(config));
  }
  kernels::RouterConfig unusual;  // no field at its default
  unusual.num_experts = 1000;
  unusual.top_k = 7;
  unusual.score_function = kernels::ScoreFunction::kSigmoid;
  unusual.num_groups = 8;
  unusual.group_top_k = 3;
  unusual.normalize_top_k = false;
  unusual.scaling_factor = 1.0f / 3.0f;  // no short decimal: the float must come back bit-exact
  configs.push_back(unusual);
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(i);
    const c10::IValue saved = kernel_path::router_config_to_ivalue(configs[i]);
    expect_same_router_config(kernel_path::router_config_from_ivalue(saved), configs[i]);
  }
  EXPECT_THROW(kernel_path::router_config_from_ivalue(c10::IValue(int64_t{3})), c10::Error);
}

// The configs the fused router may take: the kinds above, and not forced uniform routing, not
// unchecked NaN (NonFinitePolicy::kDontCheck), not what the kernel does not support, not an
// expert count that only fits the kernel's int after wrapping around.
TEST(FusedRouterConfig, CoversTheRouterKindsOnly) {
  for (const MoEConfig& config : fused_router_configs()) {
    EXPECT_TRUE(kernel_path::router_covers(config));
  }
  const MoEConfig covered = fused_router_configs()[1];
  MoEConfig uniform = covered;
  uniform.force_uniform_routing = true;
  EXPECT_FALSE(kernel_path::router_covers(uniform));
  MoEConfig unchecked = covered;
  unchecked.nonfinite_policy = NonFinitePolicy::kDontCheck;
  EXPECT_FALSE(kernel_path::router_covers(unchecked));
  MoEConfig too_many_experts = small_config(16, 24, 2048, 2);  // the kernel takes <= 1024
  EXPECT_FALSE(kernel_path::router_covers(too_many_experts));
  MoEConfig wrapping = small_config(16, 24, 8, 2);
  wrapping.num_experts += int64_t{std::numeric_limits<uint32_t>::max()} + 1;  // (int) == 8
  EXPECT_TRUE(kernels::supports_router(kernel_path::router_config(wrapping)));
  EXPECT_FALSE(kernel_path::router_covers(wrapping));
}

// The fused router may replace the Router's ATen path only because they define the same thing:
// same selection (bias for selection only, group limit by top-2 sums), same weights
// (normalisation epsilon, scaling), same gradient into the logits from weights and scores.
TEST(FusedKernelConventions, RouterReferenceIsTheRuntimeRouter) {
  int case_index = 0;
  for (const MoEConfig& config : fused_router_configs()) {
    SCOPED_TRACE(case_index++);
    torch::manual_seed(8);
    Router router(config);
    if (config.enable_expert_bias) {
      at::NoGradGuard no_grad;
      router->expert_bias.copy_(at::randn({config.num_experts}) * 0.1);
    }
    const int64_t tokens = 50;
    const RoutingResult routing = router->forward(at::randn({tokens, config.hidden_size}));
    const int64_t experts = config.num_experts, top_k = config.top_k;
    ASSERT_TRUE(kernel_path::router_covers(config));
    const kernels::RouterConfig kernel_config = kernel_path::router_config(config);
    const at::Tensor logits = routing.logits.detach().contiguous();
    const at::Tensor bias = router->expert_bias.contiguous();
    at::Tensor scores = at::empty({tokens, experts});
    at::Tensor weights = at::empty({tokens, top_k});
    std::vector<int32_t> ids(tokens * top_k), selections(experts);
    ref::router_forward(logits.data_ptr<float>(),
                        config.enable_expert_bias ? bias.data_ptr<float>() : nullptr, tokens,
                        kernel_config, scores.data_ptr<float>(), ids.data(),
                        weights.data_ptr<float>(), selections.data());
    EXPECT_TRUE(
        at::equal(int32_tensor(ids).to(at::kLong).view({tokens, top_k}), routing.top_k_indices));
    EXPECT_TRUE(at::equal(int32_tensor(selections).to(at::kLong), routing.tokens_per_expert));
    EXPECT_LT(max_abs_diff(scores, routing.scores), 1e-6);
    EXPECT_LT(max_abs_diff(weights, routing.top_k_weights), 1e-5);

    const at::Tensor grad_weights = at::randn({tokens, top_k});
    const at::Tensor grad_scores = at::randn({tokens, experts});
    const at::Tensor loss =
        (routing.top_k_weights * grad_weights).sum() + (routing.scores * grad_scores).sum();
    const at::Tensor runtime_grad_logits = torch::autograd::grad({loss}, {routing.logits})[0];
    at::Tensor reference_grad_logits = at::empty({tokens, experts});
    const at::Tensor reference_scores = scores.contiguous();
    ref::router_backward(reference_scores.data_ptr<float>(), ids.data(),
                         grad_weights.data_ptr<float>(), grad_scores.data_ptr<float>(), tokens,
                         kernel_config, reference_grad_logits.data_ptr<float>());
    EXPECT_LT(max_abs_diff(reference_grad_logits, runtime_grad_logits), 1e-5);
  }
}

}  // namespace
}  // namespace moescope::runtime
