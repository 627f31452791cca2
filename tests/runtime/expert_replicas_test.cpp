// Redundant experts and placement changes in one process: a layer whose hot experts have
// replicas computes exactly what the plain layer computes, and moving to another placement
// (weights, gradients and Adam state) changes nothing the model computes.
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include "moescope/runtime/moe_layer.h"
#include "moescope/runtime/optimizer_state.h"

using namespace moescope::runtime;

namespace {

MoEConfig small_config(int64_t redundant) {
  MoEConfig config;
  config.hidden_size = 12;
  config.ffn_hidden_size = 10;
  config.num_experts = 8;
  config.top_k = 2;
  config.init_std = 0.3;
  config.num_redundant_experts = redundant;
  config.gate_logit_skew = make_gate_skew(8, 2.0);
  return config;
}

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

/// Each slot's tensor row gathered into logical expert order (first replica): [E, ...].
at::Tensor by_expert(const at::Tensor& per_slot,
                     const moescope::balancer::ExpertPlacement& placement) {
  std::vector<int64_t> first;
  for (int e = 0; e < placement.num_logical_experts; ++e)
    first.push_back(placement.log2phy(0, e)[0]);
  return per_slot.index_select(0, at::tensor(first, at::kLong));
}

/// A placement of `config`'s slots planned for loads skewed toward the last experts.
moescope::balancer::ExpertPlacement skewed_placement(const MoEConfig& config) {
  moescope::balancer::ExpertLoads loads{1, 8, {1, 1, 2, 3, 5, 8, 13, 40}};
  moescope::balancer::PlacementConfig planner;
  planner.num_physical_experts = static_cast<int>(num_expert_slots(config));
  planner.num_gpus = 1;
  return moescope::balancer::plan_expert_placement(loads, planner);
}

TEST(ExpertReplicas, ReplicatedLayerComputesWhatThePlainLayerComputes) {
  torch::manual_seed(7);
  MoELayer plain(small_config(0));
  plain->to(at::kDouble);
  MoELayer replicated(small_config(4));
  replicated->to(at::kDouble);
  ASSERT_EQ(replicated->experts->w_gate_up.size(0), 12);
  EXPECT_EQ(replicated->expert_slots().num_replicated_experts(), 4);
  {
    at::NoGradGuard no_grad;
    replicated->router->gate_weight.copy_(plain->router->gate_weight);
  }
  replicated->load_full_expert_weights(plain->experts->w_gate_up, plain->experts->w_down);

  const at::Tensor input = at::randn({40, 12}, at::kDouble);
  const at::Tensor out_grad = at::randn({40, 12}, at::kDouble);
  at::Tensor x_plain = input.clone().requires_grad_(true);
  at::Tensor x_replicated = input.clone().requires_grad_(true);
  (plain->forward(x_plain).output * out_grad).sum().backward();
  MoEOutput out = replicated->forward(x_replicated);
  (out.output * out_grad).sum().backward();
  EXPECT_EQ(out.num_received_rows, 80);

  EXPECT_LE(max_diff(out.output, plain->forward(input).output), 1e-12);
  EXPECT_LE(max_diff(x_replicated.grad(), x_plain.grad()), 1e-12);

  // Before the sync a replica holds the gradient of its own share of the tokens only.
  const moescope::balancer::ExpertPlacement& placement = replicated->expert_slots().placement();
  const at::Tensor expected = plain->experts->w_down.grad();
  std::vector<int64_t> slot_expert;
  for (int32_t e : placement.phy2log(0)) slot_expert.push_back(e);
  const at::Tensor expected_per_slot = expected.index_select(0, at::tensor(slot_expert, at::kLong));
  EXPECT_GT(max_diff(replicated->experts->w_down.grad(), expected_per_slot), 1e-6);
  replicated->sync_replica_gradients();
  EXPECT_LE(max_diff(replicated->experts->w_down.grad(), expected_per_slot), 1e-12);
  EXPECT_LE(
      max_diff(replicated->experts->w_gate_up.grad(), plain->experts->w_gate_up.grad().index_select(
                                                          0, at::tensor(slot_expert, at::kLong))),
      1e-12);

  // The oracle of a replicated layer is the plain layer's function too.
  EXPECT_LE(max_diff(replicated->forward_loop_oracle(input).output, out.output), 1e-12);
}

// sync_replica_gradients' halves, for a loop that packs the sums into its own all-reduce: one
// process sums nothing more, so the halves alone must give what the whole does; a layer without
// replicas hands out [0, P]; a wrong shape is refused with the shape it needs.
TEST(ExpertReplicas, ReplicaGradientHalvesGiveWhatTheSyncGives) {
  torch::manual_seed(3);
  MoELayer layer(small_config(4));
  layer->to(at::kDouble);
  const at::Tensor input = at::randn({40, 12}, at::kDouble);
  layer->forward(input).output.square().sum().backward();
  const at::Tensor raw = layer->experts->w_down.grad().clone();
  const at::Tensor partial = layer->replica_gradient_partial_sums();
  const int64_t width = 12 * 2 * 10 + 10 * 12;  // one expert's w_gate_up and w_down
  ASSERT_EQ(partial.sizes(), (std::vector<int64_t>{4, width}));
  layer->take_replica_gradient_sums(partial);
  const at::Tensor halves = layer->experts->w_down.grad().clone();
  EXPECT_GT(max_diff(halves, raw), 1e-6) << "the replicas' gradients were not summed";
  layer->experts->w_down.mutable_grad().copy_(raw);
  layer->sync_replica_gradients();
  EXPECT_LE(max_diff(halves, layer->experts->w_down.grad()), 1e-12);

  try {
    layer->take_replica_gradient_sums(at::zeros({3, width}, at::kDouble));
    ADD_FAILURE() << "a [3, P] sum was taken by a layer with 4 replicated experts";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("needs [4, 360]"), std::string::npos)
        << error.what_without_backtrace();
  }
  MoELayer plain(small_config(0));
  EXPECT_EQ(plain->replica_gradient_partial_sums().sizes(), (std::vector<int64_t>{0, width}));
}

TEST(ExpertReplicas, TokensOfAReplicatedExpertAreSplitAmongItsReplicas) {
  MoEConfig config = small_config(8);  // 16 slots: room for several replicas of hot experts
  config.force_uniform_routing = true;
  MoELayer layer(config);
  layer->apply_placement(skewed_placement(config));
  const ExpertSlots& slots = layer->expert_slots();
  const at::Tensor experts = at::arange(8, at::kLong).repeat({100}).view({-1, 1});
  const at::Tensor chosen = slots.route_to_slots(experts, 0).view({-1});
  const at::Tensor per_slot = at::bincount(chosen, {}, 16);
  for (int e = 0; e < 8; ++e) {
    const int count = slots.placement().logcnt(0)[e];
    for (int r = 0; r < count; ++r) {
      const int slot = slots.placement().log2phy(0, e)[r];
      EXPECT_EQ(slots.placement().phy2log(0)[slot], e);
      // 100 tokens of expert e split over `count` replicas: within one of each other.
      EXPECT_NEAR(per_slot[slot].item<double>(), 100.0 / count, 1.0) << "expert " << e;
    }
  }
  EXPECT_GT(slots.placement().logcnt(0)[7], 1);  // the hottest expert got replicas
}

TEST(ExpertReplicas, ApplyPlacementMovesWeightsGradientsAndAdamStateUnchanged) {
  torch::manual_seed(11);
  MoEConfig config = small_config(4);
  MoELayer layer(config);
  layer->to(at::kDouble);
  torch::optim::Adam adam(layer->parameters(), torch::optim::AdamOptions(1e-2));
  const at::Tensor input = at::randn({32, 12}, at::kDouble);
  for (int step = 0; step < 2; ++step) {
    adam.zero_grad();
    layer->forward(input).output.square().sum().backward();
    layer->sync_replica_gradients();
    adam.step();
  }
  layer->forward(input).output.square().sum().backward();
  layer->sync_replica_gradients();

  const moescope::balancer::ExpertPlacement before = layer->expert_slots().placement();
  const at::Tensor output_before = layer->forward(input).output.detach();
  const at::Tensor weights_before = by_expert(layer->experts->w_gate_up.detach(), before);
  const at::Tensor grad_before = by_expert(layer->experts->w_down.grad(), before);
  const auto state_before = optimizer_state_tensors(adam, layer->experts->w_gate_up);
  ASSERT_EQ(state_before.size(), 2u);
  const at::Tensor exp_avg_before = by_expert(state_before[0], before);
  const at::Tensor* weight_identity = &layer->experts->w_gate_up;
  const void* weight_storage = layer->experts->w_gate_up.data_ptr();

  const PlacementChange change = layer->apply_placement(skewed_placement(config), {&adam});
  const moescope::balancer::ExpertPlacement& after = layer->expert_slots().placement();
  EXPECT_NE(std::vector<int32_t>(after.phy2log(0).begin(), after.phy2log(0).end()),
            std::vector<int32_t>(before.phy2log(0).begin(), before.phy2log(0).end()));
  EXPECT_GT(change.migration.slots_changed, 0);
  EXPECT_EQ(change.migration.bytes_sent, 0);  // one process: nothing crosses ranks
  EXPECT_EQ(weight_identity, &layer->experts->w_gate_up);
  EXPECT_EQ(weight_storage, layer->experts->w_gate_up.data_ptr());  // rewritten in place

  EXPECT_LE(max_diff(layer->forward(input).output.detach(), output_before), 1e-12);
  EXPECT_EQ(max_diff(by_expert(layer->experts->w_gate_up.detach(), after), weights_before), 0.0);
  EXPECT_EQ(max_diff(by_expert(layer->experts->w_down.grad(), after), grad_before), 0.0);
  const auto state_after = optimizer_state_tensors(adam, layer->experts->w_gate_up);
  EXPECT_EQ(max_diff(by_expert(state_after[0], after), exp_avg_before), 0.0);
  // Every replica of an expert holds the same state.
  for (int e = 0; e < 8; ++e) {
    for (int r = 1; r < after.logcnt(0)[e]; ++r) {
      EXPECT_EQ(
          max_diff(state_after[1][after.log2phy(0, e)[r]], state_after[1][after.log2phy(0, e)[0]]),
          0.0);
    }
  }
}

TEST(ExpertReplicas, BadPlacementsAndConfigsFailNamingTheProblem) {
  MoEConfig config = small_config(4);
  MoELayer layer(config);
  const moescope::balancer::ExpertPlacement wrong =
      moescope::balancer::make_identity_placement(1, 8, 1);  // 8 slots, the layer has 12
  try {
    layer->apply_placement(wrong);
    FAIL() << "a placement with the wrong slot count was accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("12 slots"), std::string::npos) << error.what();
  }
  config.num_redundant_experts = -1;
  EXPECT_THROW({ MoELayer bad(config); }, c10::Error);
  MoEConfig uneven = small_config(3);  // 11 slots over 2 ranks cannot be checked without a group
  try {
    validate_moe_config(uneven, 2);
    FAIL() << "11 slots over 2 ranks were accepted";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("num_redundant_experts"), std::string::npos);
  }
}

}  // namespace
