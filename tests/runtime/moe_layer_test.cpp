// MoELayer against the dense reference (every token through every expert, masked by the
// routing), against the loop-over-experts oracle, and against finite differences.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <malloc.h>

#include "moe_reference.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime {
namespace {

using testing::dense_reference_forward;
using testing::max_abs_diff;
using testing::small_config;

struct Case {
  const char* name;
  MoEConfig config;
  bool three_dim = false;  // feed [B, S, H]
};

std::vector<Case> reference_cases() {
  std::vector<Case> cases;
  cases.push_back({"softmax_top2_dropless", small_config()});
  {
    MoEConfig c = small_config();
    c.score_function = ScoreFunction::kSigmoid;
    c.normalize_top_k_weights = true;
    c.routed_scaling_factor = 2.5;
    c.num_groups = 4;
    c.group_top_k = 2;
    c.enable_expert_bias = true;
    c.num_shared_experts = 2;
    c.shared_ffn_hidden_size = 8;
    cases.push_back({"sigmoid_grouped_bias_shared", c});
  }
  {
    MoEConfig c = small_config(16, 24, 8, 3);
    c.capacity_factor = 0.6;
    c.drop_policy = DropPolicy::kByProbability;
    c.aux_loss_coeff = 0.01;
    c.z_loss_coeff = 0.001;
    cases.push_back({"capacity_by_probability_aux_z", c});
  }
  {
    MoEConfig c = small_config();
    c.capacity_factor = 0.8;
    c.drop_policy = DropPolicy::kByPosition;
    c.seq_aux_loss_coeff = 0.1;
    c.gate_logit_skew = make_gate_skew(8, 1.5);
    cases.push_back({"capacity_by_position_seq_aux_skew", c, true});
  }
  {
    MoEConfig c = small_config();
    c.force_uniform_routing = true;
    c.num_shared_experts = 1;
    cases.push_back({"forced_uniform_shared", c});
  }
  return cases;
}

// Every parameter's gradient, by name.
std::vector<std::pair<std::string, at::Tensor>> parameter_grads(MoELayerImpl& layer) {
  std::vector<std::pair<std::string, at::Tensor>> grads;
  for (const auto& item : layer.named_parameters()) {
    grads.emplace_back(item.key(),
                       item.value().grad().defined() ? item.value().grad().clone() : at::Tensor());
  }
  return grads;
}

struct ForwardBackward {
  at::Tensor output, aux_loss, grad_input;
  std::vector<std::pair<std::string, at::Tensor>> grads;
};

template <typename Forward>
ForwardBackward run(MoELayerImpl& layer, const at::Tensor& input, const at::Tensor& out_grad,
                    Forward forward) {
  layer.zero_grad();
  at::Tensor x = input.detach().clone().requires_grad_(true);
  auto [output, aux] = forward(x);
  ((output * out_grad).sum() + aux).backward();
  return {output.detach(), aux.detach(), x.grad().clone(), parameter_grads(layer)};
}

void expect_match(const ForwardBackward& a, const ForwardBackward& b, double tolerance,
                  const std::string& what) {
  EXPECT_LE(max_abs_diff(a.output, b.output), tolerance) << what << ": output";
  EXPECT_LE(max_abs_diff(a.aux_loss, b.aux_loss), tolerance) << what << ": aux loss";
  EXPECT_LE(max_abs_diff(a.grad_input, b.grad_input), tolerance) << what << ": input grad";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (!a.grads[i].second.defined() && !b.grads[i].second.defined()) continue;
    EXPECT_LE(max_abs_diff(a.grads[i].second, b.grads[i].second), tolerance)
        << what << ": grad of " << a.grads[i].first;
  }
}

void randomize_bias(MoELayerImpl& layer) {
  at::NoGradGuard no_grad;
  layer.router->expert_bias.copy_(at::randn({layer.config().num_experts}) * 0.05);
}

TEST(MoELayerReference, Float64MatchesDenseReferenceAndOracle) {
  for (const Case& c : reference_cases()) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(7);
    MoELayer layer(c.config);
    layer->to(at::kDouble);
    if (c.config.enable_expert_bias) randomize_bias(*layer);
    const at::Tensor input =
        c.three_dim ? at::randn({4, 16, 16}, at::kDouble) : at::randn({64, 16}, at::kDouble);
    const at::Tensor out_grad = at::randn(input.sizes(), at::kDouble);

    const ForwardBackward runtime = run(*layer, input, out_grad, [&](const at::Tensor& x) {
      MoEOutput out = layer->forward(x);
      return std::make_pair(out.output, out.aux_loss);
    });
    const ForwardBackward dense = run(*layer, input, out_grad, [&](const at::Tensor& x) {
      auto ref = dense_reference_forward(*layer, x);
      return std::make_pair(ref.output, ref.aux_loss);
    });
    const ForwardBackward oracle = run(*layer, input, out_grad, [&](const at::Tensor& x) {
      MoEOutput out = layer->forward_loop_oracle(x);
      return std::make_pair(out.output, out.aux_loss);
    });
    expect_match(runtime, dense, 1e-10, "runtime vs dense");
    expect_match(oracle, dense, 1e-10, "oracle vs dense");
    EXPECT_GT(runtime.output.abs().max().item<double>(), 1e-3) << "output is trivially small";

    // Dropped-assignment counts agree with the reference's per-expert sort.
    at::NoGradGuard no_grad;
    const MoEOutput out = layer->forward(input);
    const auto ref = dense_reference_forward(*layer, input);
    EXPECT_EQ(out.num_dropped, ref.num_dropped);
    if (c.config.capacity_factor > 0) {
      EXPECT_GT(out.num_dropped, 0);
    }
    EXPECT_EQ(out.tokens_per_expert.sum().item<int64_t>(), input.numel() / 16 * c.config.top_k);
  }
}

TEST(MoELayerReference, Float32MatchesDenseReference) {
  for (const Case& c : reference_cases()) {
    SCOPED_TRACE(c.name);
    torch::manual_seed(11);
    MoELayer layer(c.config);
    if (c.config.enable_expert_bias) randomize_bias(*layer);
    const at::Tensor input = c.three_dim ? at::randn({4, 16, 16}) : at::randn({64, 16});
    const at::Tensor out_grad = at::randn(input.sizes());
    const ForwardBackward runtime = run(*layer, input, out_grad, [&](const at::Tensor& x) {
      MoEOutput out = layer->forward(x);
      return std::make_pair(out.output, out.aux_loss);
    });
    const ForwardBackward dense = run(*layer, input, out_grad, [&](const at::Tensor& x) {
      auto ref = dense_reference_forward(*layer, x);
      return std::make_pair(ref.output, ref.aux_loss);
    });
    expect_match(runtime, dense, 2e-5, "float32 runtime vs dense");
  }
}

TEST(MoELayerReference, BFloat16ExpertsMatchFloat32ReferenceLoosely) {
  MoEConfig config = small_config(32, 64, 8, 2);
  config.num_shared_experts = 1;
  torch::manual_seed(3);
  MoELayer layer(config);
  const at::Tensor input = at::randn({128, 32});
  const at::Tensor out_grad = at::randn({128, 32});
  const ForwardBackward dense = run(*layer, input, out_grad, [&](const at::Tensor& x) {
    auto ref = dense_reference_forward(*layer, x);
    return std::make_pair(ref.output, ref.aux_loss);
  });
  // Experts and shared experts in bf16; the router keeps its fp32 gate (MoELayer computes it
  // in fp32 from bf16 input), so the routing is the same as the fp32 reference's.
  layer->experts->to(at::kBFloat16);
  layer->shared_experts->to(at::kBFloat16);
  const ForwardBackward bf16 =
      run(*layer, input.to(at::kBFloat16), out_grad.to(at::kBFloat16), [&](const at::Tensor& x) {
        MoEOutput out = layer->forward(x);
        return std::make_pair(out.output, out.aux_loss);
      });
  const double scale = dense.output.abs().max().item<double>();
  EXPECT_LE(max_abs_diff(bf16.output, dense.output), 0.03 * scale);
  EXPECT_LE(max_abs_diff(bf16.grad_input, dense.grad_input),
            0.03 * dense.grad_input.abs().max().item<double>());
}

// Central finite differences of a scalar loss against autograd, for every element of the
// input and every parameter (a gradcheck on a small layer).
TEST(MoELayerGradcheck, FiniteDifferencesMatchAutograd) {
  MoEConfig config = small_config(4, 5, 4, 2);
  config.aux_loss_coeff = 0.1;
  config.z_loss_coeff = 0.01;
  config.num_shared_experts = 1;
  config.capacity_factor = 0.75;
  torch::manual_seed(5);
  MoELayer layer(config);
  layer->to(at::kDouble);
  at::Tensor input = at::randn({6, 4}, at::kDouble);
  const at::Tensor out_grad = at::randn({6, 4}, at::kDouble);
  auto loss_of = [&](const at::Tensor& x) {
    MoEOutput out = layer->forward(x);
    return (out.output * out_grad).sum() + out.aux_loss;
  };

  std::vector<at::Tensor> leaves{input.requires_grad_(true)};
  for (auto& p : layer->parameters()) leaves.push_back(p);
  layer->zero_grad();
  loss_of(input).backward();
  const double eps = 1e-6;
  int64_t checked = 0;
  for (at::Tensor& leaf : leaves) {
    const at::Tensor analytic = leaf.grad().clone();
    at::Tensor flat = leaf.detach().view(-1);
    // Every element of the small leaves, every 3rd of the expert weights (keeps it fast).
    const int64_t stride = flat.numel() > 50 ? 3 : 1;
    for (int64_t i = 0; i < flat.numel(); i += stride) {
      at::NoGradGuard no_grad;
      const double saved = flat[i].item<double>();
      flat[i] = saved + eps;
      const double plus = loss_of(input.detach()).item<double>();
      flat[i] = saved - eps;
      const double minus = loss_of(input.detach()).item<double>();
      flat[i] = saved;
      const double numeric = (plus - minus) / (2 * eps);
      EXPECT_NEAR(analytic.view(-1)[i].item<double>(), numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << "element " << i << " of a leaf with shape " << leaf.sizes();
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

// Bytes glibc has handed out (heap and mmapped blocks): what tensors alive right now hold.
int64_t heap_bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

// The activation is saved by default and recomputed on request: both give the same numbers,
// and the recomputing layer keeps 2 * R * F fewer elements alive between forward and backward.
TEST(MoELayerMemory, RecomputedActivationGivesTheSameGradientsAndKeepsLessAlive) {
  const int64_t tokens = 512, hidden = 64, ffn = 256, top_k = 2;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    MoEConfig config = small_config(hidden, ffn, 4, top_k);
    config.num_shared_experts = 1;
    torch::manual_seed(13);
    MoELayer saving(config);
    config.recompute_expert_activation = true;
    MoELayer recomputing(config);
    for (MoELayer* layer : {&saving, &recomputing}) {  // the router keeps its fp32 gate
      (*layer)->experts->to(dtype);
      (*layer)->shared_experts->to(dtype);
    }
    {
      at::NoGradGuard no_grad;
      for (const auto& item : saving->named_parameters()) {
        recomputing->named_parameters()[item.key()].copy_(item.value());
      }
    }
    const at::Tensor input = at::randn({tokens, hidden}).to(dtype);
    const at::Tensor out_grad = at::randn({tokens, hidden}).to(dtype);
    auto forward_of = [](MoELayer& layer) {
      return [&layer](const at::Tensor& x) {
        MoEOutput out = layer->forward(x);
        return std::make_pair(out.output, out.aux_loss);
      };
    };
    expect_match(run(*saving, input, out_grad, forward_of(saving)),
                 run(*recomputing, input, out_grad, forward_of(recomputing)), 0.0,
                 "saved vs recomputed activation");

    // What a forward keeps alive for backward: rows routed R = tokens * top_k, plus the shared
    // expert's R = tokens rows of width F. Measured without the experts' tensor cache, whose
    // blocks (with headroom, and kept after release) would blur what the tensors themselves hold.
    HostTensorCache& cache = HostTensorCache::experts();
    cache.set_max_cached_bytes(0);
    auto bytes_kept_by_forward = [&](MoELayer& layer) {
      const at::Tensor x = input.detach().clone().requires_grad_(true);
      const int64_t before = heap_bytes_in_use();
      const MoEOutput out = layer->forward(x);
      return heap_bytes_in_use() - before;
    };
    const int64_t saved_elements = 2 * (tokens * top_k + tokens) * ffn;
    const int64_t expected = saved_elements * static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t difference = bytes_kept_by_forward(saving) - bytes_kept_by_forward(recomputing);
    EXPECT_GE(difference, expected * 9 / 10) << "expected about " << expected << " bytes";
    EXPECT_LE(difference, expected * 11 / 10) << "expected about " << expected << " bytes";
    cache.set_max_cached_bytes(kDefaultExpertsCacheBytes);
  }
}

TEST(MoELayerShapes, EmptyBatchGivesEmptyOutputAndZeroLoss) {
  MoEConfig config = small_config();
  config.aux_loss_coeff = 0.01;
  config.z_loss_coeff = 0.001;
  config.capacity_factor = 1.0;
  config.num_shared_experts = 1;
  MoELayer layer(config);
  at::Tensor x = at::randn({0, 16}).requires_grad_(true);
  MoEOutput out = layer->forward(x);
  EXPECT_EQ(out.output.sizes(), x.sizes());
  EXPECT_EQ(out.aux_loss.item<double>(), 0.0);
  EXPECT_EQ(out.num_dropped, 0);
  (out.output.sum() + out.aux_loss).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().sizes(), x.sizes());
}

TEST(MoELayerShapes, OneExpertTakesAllTokensAndOthersStayIdle) {
  MoEConfig config = small_config(16, 24, 4, 1);
  config.gate_logit_skew = {100.0, 0.0, 0.0, 0.0};
  torch::manual_seed(2);
  MoELayer layer(config);
  layer->to(at::kDouble);
  at::Tensor x = at::randn({32, 16}, at::kDouble);
  MoEOutput out = layer->forward(x);
  EXPECT_EQ(out.tokens_per_expert[0].item<int64_t>(), 32);
  out.output.sum().backward();
  // Idle experts get exactly zero weight gradient, the busy one a non-zero one.
  EXPECT_GT(layer->experts->w_gate_up.grad()[0].abs().sum().item<double>(), 0.0);
  EXPECT_EQ(layer->experts->w_gate_up.grad().narrow(0, 1, 3).abs().sum().item<double>(), 0.0);
  const auto ref = dense_reference_forward(*layer, x);
  EXPECT_LE(max_abs_diff(out.output, ref.output), 1e-10);
}

}  // namespace
}  // namespace moescope::runtime
