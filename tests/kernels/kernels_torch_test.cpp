// Every CPU reference against an independent LibTorch composition on random inputs: fresh
// seeds (printed on failure), odd sizes, zero-token experts, one expert taking all tokens.
// The only torch translation unit of the kernels tests.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moescope/kernels/cpu_reference.h"

namespace mk = moescope::kernels;
namespace ref = moescope::kernels::reference;

namespace {

unsigned fresh_seed() {
  return std::random_device{}();
}

const at::TensorOptions kFloat = at::TensorOptions().dtype(at::kFloat);
const at::TensorOptions kInt = at::TensorOptions().dtype(at::kInt);

at::ScalarType torch_type(mk::DType dtype) {
  return dtype == mk::DType::kFloat32 ? at::kFloat : at::kBFloat16;
}

void expect_close(const at::Tensor& actual, const at::Tensor& expected, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const auto a = actual.to(at::kDouble), e = expected.to(at::kDouble);
  const bool close = at::allclose(a, e, rtol, atol);
  EXPECT_TRUE(close) << what << ": max abs diff " << (a - e).abs().max().item<double>();
}

struct RouterCase {
  mk::RouterConfig config;
  bool with_bias;
};

// Torch composition of the router: returns {scores, ids, weights}.
std::vector<at::Tensor> torch_router(const at::Tensor& logits, const at::Tensor& bias,
                                     const mk::RouterConfig& c) {
  const auto scores = c.score_function == mk::ScoreFunction::kSoftmax ? at::softmax(logits, 1)
                                                                      : at::sigmoid(logits);
  auto selection = bias.defined() ? scores + bias : scores.clone();
  const int64_t tokens = logits.size(0);
  if (c.num_groups > 1) {
    const int64_t per_group = c.num_experts / c.num_groups;
    const auto grouped = selection.view({tokens, c.num_groups, per_group});
    const auto group_scores = std::get<0>(grouped.topk(std::min<int64_t>(2, per_group), 2)).sum(2);
    const auto kept_groups = std::get<1>(group_scores.topk(c.group_top_k, 1));
    const auto group_mask = at::zeros({tokens, c.num_groups}, kFloat).scatter(1, kept_groups, 1.0);
    const auto expert_mask =
        group_mask.unsqueeze(2).expand({tokens, c.num_groups, per_group}).reshape({tokens, -1});
    selection = selection.masked_fill(expert_mask.eq(0), -INFINITY);
  }
  const auto ids = std::get<1>(selection.detach().topk(c.top_k, 1));
  auto weights = scores.gather(1, ids);
  if (c.normalize_top_k) weights = weights / (weights.sum(1, true) + mk::kNormalizeEpsilon);
  weights = weights * c.scaling_factor;
  return {scores, ids, weights};
}

std::vector<RouterCase> router_cases() {
  std::vector<RouterCase> cases;
  auto add = [&](int experts, int k, mk::ScoreFunction f, int groups, int group_k, bool normalize,
                 float scale, bool bias) {
    mk::RouterConfig c;
    c.num_experts = experts;
    c.top_k = k;
    c.score_function = f;
    c.num_groups = groups;
    c.group_top_k = group_k;
    c.normalize_top_k = normalize;
    c.scaling_factor = scale;
    cases.push_back({c, bias});
  };
  add(8, 2, mk::ScoreFunction::kSoftmax, 1, 1, false, 1.0f, false);  // Mixtral-like
  add(13, 1, mk::ScoreFunction::kSoftmax, 1, 1, true, 1.0f, true);   // odd, top-1
  add(64, 6, mk::ScoreFunction::kSoftmax, 1, 1, true, 1.0f, false);
  add(32, 8, mk::ScoreFunction::kSigmoid, 8, 4, true, 2.5f, true);    // DeepSeek-V3-like
  add(30, 3, mk::ScoreFunction::kSigmoid, 10, 3, false, 1.0f, true);  // groups of 3
  add(12, 4, mk::ScoreFunction::kSoftmax, 12, 5, true, 1.0f, false);  // groups of 1
  add(5, 5, mk::ScoreFunction::kSigmoid, 1, 1, true, 1.0f, true);     // k == E
  return cases;
}

}  // namespace

TEST(KernelsVsTorch, RouterForwardMatchesComposition) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  for (const auto& [config, with_bias] : router_cases()) {
    SCOPED_TRACE("experts " + std::to_string(config.num_experts) + " k " +
                 std::to_string(config.top_k) + " groups " + std::to_string(config.num_groups));
    const int64_t tokens = 97;
    const auto logits = at::randn({tokens, config.num_experts}, kFloat);
    const auto bias = with_bias ? 0.05 * at::randn({config.num_experts}, kFloat) : at::Tensor();
    auto scores = at::empty_like(logits);
    auto ids = at::empty({tokens, config.top_k}, kInt);
    auto weights = at::empty({tokens, config.top_k}, kFloat);
    auto counts = at::full({config.num_experts}, -1, kInt);
    ref::router_forward(logits.data_ptr<float>(), with_bias ? bias.data_ptr<float>() : nullptr,
                        tokens, config, scores.data_ptr<float>(), ids.data_ptr<int32_t>(),
                        weights.data_ptr<float>(), counts.data_ptr<int32_t>());
    const auto expected = torch_router(logits, bias, config);
    expect_close(scores, expected[0], 1e-6, 1e-7, "scores");
    EXPECT_TRUE(at::equal(ids.to(at::kLong), expected[1])) << "topk ids";
    expect_close(weights, expected[2], 1e-5, 1e-7, "weights");
    EXPECT_TRUE(at::equal(counts.to(at::kLong),
                          at::bincount(expected[1].flatten(), {}, config.num_experts)));
  }
}

TEST(KernelsVsTorch, RouterBackwardMatchesAutograd) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  for (const auto& [config, with_bias] : router_cases()) {
    for (bool with_grad_scores : {false, true}) {
      const int64_t tokens = 31;
      const auto logits = at::randn({tokens, config.num_experts}, kFloat);
      const auto bias = with_bias ? 0.05 * at::randn({config.num_experts}, kFloat) : at::Tensor();
      auto scores = at::empty_like(logits);
      auto ids = at::empty({tokens, config.top_k}, kInt);
      auto weights = at::empty({tokens, config.top_k}, kFloat);
      ref::router_forward(logits.data_ptr<float>(), with_bias ? bias.data_ptr<float>() : nullptr,
                          tokens, config, scores.data_ptr<float>(), ids.data_ptr<int32_t>(),
                          weights.data_ptr<float>(), nullptr);
      const auto grad_weights = at::randn({tokens, config.top_k}, kFloat);
      const auto grad_scores = at::randn({tokens, config.num_experts}, kFloat);
      auto grad_logits = at::empty_like(logits);
      ref::router_backward(scores.data_ptr<float>(), ids.data_ptr<int32_t>(),
                           grad_weights.data_ptr<float>(),
                           with_grad_scores ? grad_scores.data_ptr<float>() : nullptr, tokens,
                           config, grad_logits.data_ptr<float>());
      const auto leaf = logits.clone().requires_grad_(true);
      const auto out = torch_router(leaf, bias, config);
      auto loss = (out[2] * grad_weights).sum();
      if (with_grad_scores) loss = loss + (out[0] * grad_scores).sum();
      loss.backward();
      expect_close(grad_logits, leaf.grad(), 1e-4, 1e-6, "grad_logits");
    }
  }
}

TEST(KernelsVsTorch, RoutingMapMatchesStableSort) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 12; ++trial) {
    const int experts = std::uniform_int_distribution<int>(1, 33)(rng);
    const int64_t n = std::uniform_int_distribution<int>(0, 999)(rng);
    const int alignment = std::vector<int>{1, 8, 16, 5}[trial % 4];
    at::Tensor ids;
    if (trial == 1) {
      ids = at::full({n}, experts - 1, kInt);  // one expert takes everything
    } else {
      // Skewed draw over half the experts, so some experts get zero tokens; ~10% dropped.
      ids = at::randint(0, std::max(1, experts / 2), {n}, kInt);
      ids.masked_fill_(at::rand({n}, kFloat) < 0.1, -1);
    }
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t capacity = mk::permuted_row_capacity(n, experts, alignment);
    auto tokens_per_expert = at::empty({experts}, kInt);
    auto offsets = at::empty({experts + 1}, kInt);
    auto destination = at::empty({n}, kInt);
    auto sources = at::empty({capacity}, kInt);
    ref::build_routing_map(ids.data_ptr<int32_t>(), n, experts, alignment,
                           tokens_per_expert.data_ptr<int32_t>(), offsets.data_ptr<int32_t>(),
                           destination.data_ptr<int32_t>(), sources.data_ptr<int32_t>(), capacity);
    const auto ids64 = ids.to(at::kLong);
    const auto valid = ids64.ge(0);
    const auto counts = at::bincount(ids64.masked_select(valid), {}, experts);
    const auto padded = at::div(counts + (alignment - 1), alignment, "floor") * alignment;
    const auto expected_offsets = at::cat({at::zeros({1}, at::kLong), padded.cumsum(0)});
    EXPECT_TRUE(at::equal(tokens_per_expert.to(at::kLong), counts));
    EXPECT_TRUE(at::equal(offsets.to(at::kLong), expected_offsets));
    // Stable sort by expert (dropped last): position q among the valid ones lands at
    // offsets[e] + (q - unpadded start of e).
    const auto key = at::where(valid, ids64, at::full_like(ids64, experts));
    const auto sorted = at::sort(key, /*stable=*/true, 0, false);
    const int64_t num_valid = valid.sum().item<int64_t>();
    const auto sorted_experts = std::get<0>(sorted).slice(0, 0, num_valid);
    const auto order = std::get<1>(sorted).slice(0, 0, num_valid);
    const auto unpadded_start = counts.cumsum(0) - counts;
    const auto rows = expected_offsets.index_select(0, sorted_experts) +
                      at::arange(num_valid, at::kLong) -
                      unpadded_start.index_select(0, sorted_experts);
    auto expected_destination = at::full({n}, -1, at::kLong);
    expected_destination.index_put_({order}, rows);
    EXPECT_TRUE(at::equal(destination.to(at::kLong), expected_destination));
    auto expected_sources = at::full({capacity}, -1, at::kLong);
    expected_sources.index_put_({rows}, order);
    EXPECT_TRUE(at::equal(sources.to(at::kLong), expected_sources));
  }
}

namespace {

// Random routing for T tokens, k choices over E experts (some experts empty, some dropped).
struct Routing {
  int64_t tokens, hidden;
  int top_k, experts;
  at::Tensor destination, sources;  // int32
  int64_t capacity;
};

Routing random_routing(std::mt19937& rng, int64_t tokens, int64_t hidden, int top_k, int experts) {
  Routing r{tokens, hidden, top_k, experts, {}, {}, 0};
  auto ids = at::randint(0, std::max(1, experts - 2), {tokens * top_k}, kInt);  // last 2 empty
  ids.masked_fill_(at::rand({tokens * top_k}, kFloat) < 0.15, -1);
  (void)rng;
  const int alignment = 8;
  r.capacity = mk::permuted_row_capacity(tokens * top_k, experts, alignment);
  auto counts = at::empty({experts}, kInt), offsets = at::empty({experts + 1}, kInt);
  r.destination = at::empty({tokens * top_k}, kInt);
  r.sources = at::empty({r.capacity}, kInt);
  ref::build_routing_map(ids.data_ptr<int32_t>(), tokens * top_k, experts, alignment,
                         counts.data_ptr<int32_t>(), offsets.data_ptr<int32_t>(),
                         r.destination.data_ptr<int32_t>(), r.sources.data_ptr<int32_t>(),
                         r.capacity);
  return r;
}

double tolerance(mk::DType dtype) {
  return dtype == mk::DType::kFloat32 ? 1e-5 : 1e-2;
}

}  // namespace

TEST(KernelsVsTorch, PermuteAndBackwardMatchIndexing) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  std::mt19937 rng(seed);
  for (mk::DType dtype : {mk::DType::kFloat32, mk::DType::kBFloat16}) {
    const auto r = random_routing(rng, 77, 45, 3, 9);
    const auto tokens = at::randn({r.tokens, r.hidden}, kFloat).to(torch_type(dtype));
    auto permuted = at::full({r.capacity, r.hidden}, NAN, kFloat).to(torch_type(dtype));
    ref::permute_tokens(tokens.data_ptr(), dtype, r.tokens, r.hidden, r.top_k,
                        r.sources.data_ptr<int32_t>(), r.capacity, permuted.data_ptr());
    const auto src = r.sources.to(at::kLong);
    const auto expected = tokens.index_select(0, at::div(src.clamp_min(0), r.top_k, "floor")) *
                          src.ge(0).unsqueeze(1).to(tokens.scalar_type());
    EXPECT_TRUE(at::equal(permuted, expected)) << mk::dtype_name(dtype);

    // Backward: autograd of the same gather in float.
    const auto grad_permuted = at::randn({r.capacity, r.hidden}, kFloat).to(torch_type(dtype));
    auto grad_tokens = at::full({r.tokens, r.hidden}, NAN, kFloat).to(torch_type(dtype));
    ref::permute_tokens_backward(grad_permuted.data_ptr(), dtype, r.tokens, r.hidden, r.top_k,
                                 r.destination.data_ptr<int32_t>(), grad_tokens.data_ptr());
    const auto leaf = tokens.to(at::kFloat).requires_grad_(true);
    const auto gathered = leaf.index_select(0, at::div(src.clamp_min(0), r.top_k, "floor")) *
                          src.ge(0).unsqueeze(1).to(at::kFloat);
    gathered.backward(grad_permuted.to(at::kFloat));
    expect_close(grad_tokens, leaf.grad(), tolerance(dtype), tolerance(dtype), "grad_tokens");
  }
}

TEST(KernelsVsTorch, CombineAndBackwardMatchAutograd) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  std::mt19937 rng(seed);
  for (mk::DType dtype : {mk::DType::kFloat32, mk::DType::kBFloat16}) {
    const auto r = random_routing(rng, 65, 37, 4, 11);
    const auto expert_output = at::randn({r.capacity, r.hidden}, kFloat).to(torch_type(dtype));
    const auto weights = at::rand({r.tokens, r.top_k}, kFloat);
    auto output = at::full({r.tokens, r.hidden}, NAN, kFloat).to(torch_type(dtype));
    ref::unpermute_combine(expert_output.data_ptr(), dtype, weights.data_ptr<float>(),
                           r.destination.data_ptr<int32_t>(), r.tokens, r.hidden, r.top_k,
                           output.data_ptr());
    const auto dest = r.destination.to(at::kLong);
    const auto y = expert_output.to(at::kFloat).requires_grad_(true);
    const auto w = weights.clone().requires_grad_(true);
    const auto gathered = y.index_select(0, dest.clamp_min(0)).view({r.tokens, r.top_k, r.hidden});
    const auto masked_w = w * dest.ge(0).view({r.tokens, r.top_k}).to(at::kFloat);
    const auto expected = (gathered * masked_w.unsqueeze(2)).sum(1);
    expect_close(output, expected.to(torch_type(dtype)), tolerance(dtype), tolerance(dtype),
                 std::string("output ") + mk::dtype_name(dtype));

    const auto grad_output = at::randn({r.tokens, r.hidden}, kFloat).to(torch_type(dtype));
    expected.backward(grad_output.to(at::kFloat));
    auto grad_expert_output = at::full({r.capacity, r.hidden}, NAN, kFloat).to(torch_type(dtype));
    auto grad_weights = at::full({r.tokens, r.top_k}, NAN, kFloat);
    ref::unpermute_combine_backward(
        grad_output.data_ptr(), expert_output.data_ptr(), dtype, weights.data_ptr<float>(),
        r.destination.data_ptr<int32_t>(), r.sources.data_ptr<int32_t>(), r.capacity, r.tokens,
        r.hidden, r.top_k, grad_expert_output.data_ptr(), grad_weights.data_ptr<float>());
    expect_close(grad_expert_output, y.grad(), tolerance(dtype), tolerance(dtype),
                 std::string("grad_expert_output ") + mk::dtype_name(dtype));
    expect_close(grad_weights, w.grad(), tolerance(dtype), 1e-4, "grad_weights");
  }
}

TEST(KernelsVsTorch, GroupedGemmAndWeightGradMatchPerGroupMatmul) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  at::manual_seed(seed);
  for (mk::DType dtype : {mk::DType::kFloat32, mk::DType::kBFloat16}) {
    for (bool b_is_n_by_k : {false, true}) {
      const int groups = 5;
      const int64_t k = 24, n = 17;
      // Group sizes 9, 0, 16, 1, 0 (empty groups in the middle and at the end).
      std::vector<int32_t> offsets = {0, 9, 9, 25, 26, 26};
      const int64_t rows = offsets.back();
      const auto a = at::randn({rows, k}, kFloat).to(torch_type(dtype));
      const auto b =
          (b_is_n_by_k ? at::randn({groups, n, k}, kFloat) : at::randn({groups, k, n}, kFloat))
              .to(torch_type(dtype));
      auto c = at::full({rows, n}, NAN, kFloat).to(torch_type(dtype));
      ref::grouped_gemm(a.data_ptr(), b.data_ptr(), c.data_ptr(), dtype, groups, offsets.data(), k,
                        n, b_is_n_by_k);
      const auto a32 = a.to(at::kFloat), b32 = b.to(at::kFloat);
      std::vector<at::Tensor> parts;
      for (int g = 0; g < groups; ++g) {
        const auto bg = b_is_n_by_k ? b32[g].t() : b32[g];
        parts.push_back(a32.slice(0, offsets[g], offsets[g + 1]).mm(bg));
      }
      expect_close(c, at::cat(parts).to(torch_type(dtype)), tolerance(dtype), tolerance(dtype),
                   std::string("grouped_gemm ") + mk::dtype_name(dtype));
    }
    const int groups = 3;
    const int64_t k = 8, n = 13;
    std::vector<int32_t> offsets = {0, 0, 11, 19};
    const auto a = at::randn({19, k}, kFloat).to(torch_type(dtype));
    const auto grad_c = at::randn({19, n}, kFloat).to(torch_type(dtype));
    auto grad_b = at::full({groups, k, n}, NAN, kFloat).to(torch_type(dtype));
    ref::grouped_gemm_weight_grad(a.data_ptr(), grad_c.data_ptr(), grad_b.data_ptr(), dtype, groups,
                                  offsets.data(), k, n);
    std::vector<at::Tensor> parts;
    for (int g = 0; g < groups; ++g) {
      parts.push_back(a.to(at::kFloat)
                          .slice(0, offsets[g], offsets[g + 1])
                          .t()
                          .mm(grad_c.to(at::kFloat).slice(0, offsets[g], offsets[g + 1])));
    }
    expect_close(grad_b, at::stack(parts).to(torch_type(dtype)), tolerance(dtype), tolerance(dtype),
                 std::string("weight_grad ") + mk::dtype_name(dtype));
  }
}
