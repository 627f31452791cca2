// MoELayer behaviour beyond the arithmetic: bad input errors, aux-loss-free balancing on a
// skewed stream, routing record/replay, capacity accounting.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdio>
#include <limits>
#include <memory>

#include "moe_reference.h"
#include "moescope/runtime/moe_layer.h"
#include "moescope/runtime/token_dispatcher.h"

namespace moescope::runtime {
namespace {

using testing::expect_error_mentions;
using testing::max_abs_diff;
using testing::small_config;

TEST(MoELayerBadInput, ConfigErrorsNameTheField) {
  MoEConfig config = small_config();
  config.top_k = 9;
  expect_error_mentions([&] { MoELayer layer(config); }, {"top_k", "num_experts=8"});

  config = small_config();
  expect_error_mentions([&] { validate_moe_config(config, 3); },
                        {"num_experts (8)", "expert-parallel group size (3)"});

  config = small_config();
  config.num_groups = 3;
  expect_error_mentions([&] { MoELayer layer(config); }, {"num_groups (3)", "num_experts (8)"});

  config = small_config();
  config.num_groups = 4;
  config.group_top_k = 5;
  expect_error_mentions([&] { MoELayer layer(config); }, {"group_top_k"});

  config = small_config(16, 24, 8, 4);
  config.num_groups = 4;  // 2 experts per group
  config.group_top_k = 1;
  expect_error_mentions([&] { MoELayer layer(config); }, {"group_top_k (1)", "top_k (4)"});

  config = small_config();
  config.hidden_size = 0;
  expect_error_mentions([&] { MoELayer layer(config); }, {"hidden_size"});

  config = small_config();
  config.gate_logit_skew = {1.0, 2.0};
  expect_error_mentions([&] { MoELayer layer(config); }, {"gate_logit_skew"});
}

TEST(MoELayerBadInput, InputErrorsNameTheArgument) {
  MoELayer layer(small_config());
  expect_error_mentions(
      [&] {
        layer->forward(at::randn({4, 15}));
      },
      {"hidden size 15", "MoEConfig.hidden_size 16"});
  expect_error_mentions(
      [&] {
        layer->forward(at::randn({4, 16}, at::kDouble));
      },
      {"input dtype", "Double", "Float"});
  expect_error_mentions([&] { layer->forward(at::randn({16})); }, {"[num_tokens, hidden]"});
  expect_error_mentions([&] { layer->forward(at::ones({4, 16}, at::kInt)); }, {"floating"});

  MoEConfig seq = small_config();
  seq.seq_aux_loss_coeff = 0.1;
  MoELayer seq_layer(seq);
  expect_error_mentions(
      [&] {
        seq_layer->forward(at::randn({8, 16}));
      },
      {"seq_aux_loss_coeff", "[batch, seq, hidden]"});
  EXPECT_NO_THROW(seq_layer->forward(at::randn({2, 4, 16})));
}

TEST(MoELayerBadInput, NonFiniteRouterLogitsRaiseUnlessDisabled) {
  MoEConfig config = small_config();
  config.layer_index = 3;
  MoELayer layer(config);
  at::Tensor x = at::randn({8, 16});
  x[5][2] = std::numeric_limits<float>::quiet_NaN();
  expect_error_mentions([&] { layer->forward(x); }, {"MoE layer 3", "NaN or Inf"});
  x[5][2] = std::numeric_limits<float>::infinity();
  expect_error_mentions([&] { layer->forward(x); }, {"NaN or Inf"});

  // The documented alternative: no check, the NaN stays visible in the output (never masked).
  config.nonfinite_policy = NonFinitePolicy::kDontCheck;
  MoELayer unchecked(config);
  x[5][2] = std::numeric_limits<float>::quiet_NaN();
  const MoEOutput out = unchecked->forward(x);
  EXPECT_TRUE(at::isnan(out.output[5]).any().item<bool>());
}

TEST(MoELayerBadInput, UpdateBiasWithoutBiasAndBadReplayAreErrors) {
  MoELayer layer(small_config());
  expect_error_mentions([&] { layer->update_expert_bias(); }, {"enable_expert_bias"});

  auto replay = std::make_shared<RoutingReplay>();
  replay->set_mode(RoutingReplay::Mode::kReplay);
  replay->set_step(42);
  layer->set_routing_replay(replay);
  expect_error_mentions([&] { layer->forward(at::randn({4, 16})); }, {"step 42", "layer 0"});
}

// max/mean of tokens per expert.
double imbalance(const at::Tensor& load) {
  const at::Tensor f = load.to(at::kDouble);
  return (f.max() / f.mean()).item<double>();
}

// Aux-loss-free balancing against a skewed gate: the bias must bring max/mean load down.
TEST(MoELayerBalancing, ExpertBiasLowersMaxOverMeanLoadOnSkewedStream) {
  auto run_stream = [](bool use_bias) {
    MoEConfig config = small_config(16, 8, 8, 2);
    config.score_function = ScoreFunction::kSigmoid;
    config.normalize_top_k_weights = true;
    config.gate_logit_skew = make_gate_skew(8, 3.0);
    config.enable_expert_bias = use_bias;
    config.expert_bias_update_rate = 0.02;
    torch::manual_seed(21);
    MoELayer layer(config);
    layer->train();
    at::NoGradGuard no_grad;
    at::Tensor first = at::zeros({8}, at::kLong), last = at::zeros({8}, at::kLong);
    const int steps = 200;
    for (int step = 0; step < steps; ++step) {
      const MoEOutput out = layer->forward(at::randn({128, 16}));
      if (step < 5) first += out.tokens_per_expert;
      if (step >= steps - 20) last += out.tokens_per_expert;
      if (use_bias) layer->update_expert_bias();
    }
    return std::make_pair(imbalance(first), imbalance(last));
  };
  const auto [baseline_first, baseline_last] = run_stream(false);
  const auto [biased_first, biased_last] = run_stream(true);
  // The skew really overloads experts: about 2x the mean on the hottest one.
  EXPECT_GT(baseline_first, 1.6);
  EXPECT_GT(baseline_last, 1.6);
  // With the bias: starts as skewed, ends down by at least 30% and close to balanced.
  EXPECT_GT(biased_first, 1.6);
  EXPECT_LT(biased_last, 0.7 * biased_first);
  EXPECT_LT(biased_last, 1.25);
  EXPECT_LT(biased_last, 0.7 * baseline_last);
}

TEST(MoELayerBalancing, BiasUpdateFollowsSignOfMeanMinusLoad) {
  MoEConfig config = small_config(16, 8, 4, 1);
  config.enable_expert_bias = true;
  config.expert_bias_update_rate = 0.5;
  MoELayer layer(config);
  layer->router->update_expert_bias(at::tensor({10, 2, 4, 4}, at::kLong));  // mean 5
  const at::Tensor bias = layer->router->expert_bias;
  EXPECT_FLOAT_EQ(bias[0].item<float>(), -0.5f);
  EXPECT_FLOAT_EQ(bias[1].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(bias[2].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(bias[3].item<float>(), 0.5f);
}

TEST(MoELayerReplay, ReplayReproducesRecordedRoutingWithRouterBypassed) {
  MoEConfig config = small_config();
  config.layer_index = 2;
  torch::manual_seed(9);
  MoELayer layer(config);
  layer->to(at::kDouble);
  const at::Tensor x = at::randn({48, 16}, at::kDouble);

  auto recorder = std::make_shared<RoutingReplay>();
  recorder->set_mode(RoutingReplay::Mode::kRecord);
  recorder->set_step(7);
  layer->set_routing_replay(recorder);
  const MoEOutput recorded = layer->forward(x);
  ASSERT_TRUE(recorder->contains(7, 2));
  const at::Tensor recorded_choices = recorder->replay(2);

  const std::string path = ::testing::TempDir() + "moescope_routing_replay.pt";
  recorder->save(path);
  auto replayer = std::make_shared<RoutingReplay>();
  replayer->load(path);
  std::remove(path.c_str());
  ASSERT_EQ(replayer->size(), 1u);
  replayer->set_mode(RoutingReplay::Mode::kReplay);
  replayer->set_step(7);

  // Same weights: replay is bit-identical.
  layer->set_routing_replay(replayer);
  const MoEOutput replayed = layer->forward(x);
  EXPECT_TRUE(at::equal(replayed.output, recorded.output));

  // A different gate would route differently; replay still uses the recorded experts.
  {
    at::NoGradGuard no_grad;
    layer->router->gate_weight.copy_(at::randn_like(layer->router->gate_weight));
  }
  layer->set_routing_replay(nullptr);
  const MoEOutput rerouted = layer->forward(x);
  EXPECT_FALSE(at::equal(rerouted.tokens_per_expert, recorded.tokens_per_expert));
  layer->set_routing_replay(replayer);
  const MoEOutput forced = layer->forward(x);
  EXPECT_TRUE(at::equal(forced.tokens_per_expert, recorded.tokens_per_expert));
  EXPECT_TRUE(at::equal(replayer->replay(2), recorded_choices));
}

TEST(TokenDispatcher, CapacityKeepsHighestWeightsOrEarliestTokens) {
  // 4 tokens all to expert 0, capacity 2.
  const at::Tensor indices = at::zeros({4, 1}, at::kLong);
  const at::Tensor weights = at::tensor({0.1, 0.9, 0.5, 0.7}, at::kDouble).view({4, 1});
  const CapacityResult by_probability =
      apply_expert_capacity(indices, weights, 2, 2, DropPolicy::kByProbability);
  EXPECT_EQ(by_probability.num_dropped, 2);
  EXPECT_TRUE(at::equal(by_probability.keep_mask.view(-1), at::tensor({0, 1, 0, 1}).to(at::kBool)));
  const CapacityResult by_position =
      apply_expert_capacity(indices, weights, 2, 2, DropPolicy::kByPosition);
  EXPECT_TRUE(at::equal(by_position.keep_mask.view(-1), at::tensor({1, 1, 0, 0}).to(at::kBool)));

  const DispatchPlan plan = build_dispatch_plan(at::tensor({1, 0, 2, 1}, at::kLong).view({2, 2}),
                                                by_position.keep_mask.view({2, 2}), 3);
  EXPECT_EQ(plan.rows_per_expert, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_TRUE(at::equal(plan.row_to_token, at::tensor({0, 0}, at::kLong)));
  EXPECT_TRUE(at::equal(plan.row_to_assignment, at::tensor({1, 0}, at::kLong)));
}

}  // namespace
}  // namespace moescope::runtime
