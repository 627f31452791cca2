// Properties of the CPU references that need no oracle: histogram sums, scan monotone and
// aligned, destination rows a stable bijection, permute/unpermute round trip, router
// invariants, router backward against finite differences, argument errors, supports_* limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "moescope/kernels/cpu_reference.h"
#include "moescope/kernels/launchers.h"

namespace mk = moescope::kernels;
namespace ref = moescope::kernels::reference;

namespace {

unsigned fresh_seed() {
  return std::random_device{}();
}

struct RoutingMap {
  std::vector<std::int32_t> tokens_per_expert, group_offsets, destination_rows, row_sources;
};

RoutingMap build_map(const std::vector<std::int32_t>& ids, int num_experts, int alignment) {
  RoutingMap map;
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t capacity = mk::permuted_row_capacity(n, num_experts, alignment);
  map.tokens_per_expert.assign(num_experts, -7);
  map.group_offsets.assign(num_experts + 1, -7);
  map.destination_rows.assign(ids.size(), -7);
  map.row_sources.assign(capacity, -7);
  ref::build_routing_map(ids.data(), n, num_experts, alignment, map.tokens_per_expert.data(),
                         map.group_offsets.data(), map.destination_rows.data(),
                         map.row_sources.data(), capacity);
  return map;
}

// Checks every invariant of a routing map against the ids it came from.
void expect_valid_map(const std::vector<std::int32_t>& ids, int num_experts, int alignment,
                      const RoutingMap& map) {
  std::vector<std::int32_t> counted(num_experts, 0);
  for (std::int32_t id : ids) {
    if (id >= 0) ++counted[id];
  }
  EXPECT_EQ(map.tokens_per_expert, counted);
  ASSERT_EQ(map.group_offsets[0], 0);
  for (int e = 0; e < num_experts; ++e) {
    const int size = map.group_offsets[e + 1] - map.group_offsets[e];
    EXPECT_GE(size, counted[e]) << "expert " << e;
    EXPECT_LT(size, counted[e] + alignment) << "expert " << e;
    EXPECT_EQ(map.group_offsets[e] % alignment, 0) << "expert " << e;
  }
  std::vector<std::int32_t> last_row(num_experts, -1);
  std::set<std::int32_t> used_rows;
  for (std::size_t n = 0; n < ids.size(); ++n) {
    const std::int32_t row = map.destination_rows[n];
    if (ids[n] < 0) {
      EXPECT_EQ(row, -1) << "dropped assignment " << n;
      continue;
    }
    const int e = ids[n];
    EXPECT_GE(row, map.group_offsets[e]);
    EXPECT_LT(row, map.group_offsets[e] + counted[e]);
    EXPECT_GT(row, last_row[e]) << "order inside expert " << e << " is not assignment order";
    last_row[e] = row;
    EXPECT_TRUE(used_rows.insert(row).second) << "row " << row << " used twice";
    EXPECT_EQ(map.row_sources[row], static_cast<std::int32_t>(n));
  }
  for (std::size_t r = 0; r < map.row_sources.size(); ++r) {
    if (!used_rows.count(static_cast<std::int32_t>(r))) {
      EXPECT_EQ(map.row_sources[r], -1) << "padding row " << r;
    }
  }
}

std::vector<std::int32_t> random_ids(std::mt19937& rng, std::int64_t count, int num_experts,
                                     double drop_probability) {
  std::uniform_int_distribution<int> expert(0, num_experts - 1);
  std::bernoulli_distribution drop(drop_probability);
  std::vector<std::int32_t> ids(count);
  for (auto& id : ids) id = drop(rng) ? -1 : expert(rng);
  return ids;
}

}  // namespace

TEST(KernelsBf16, ConversionRoundsToNearestEvenAndKeepsNaN) {
  EXPECT_EQ(mk::bf16_to_float(mk::float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(mk::bf16_to_float(mk::float_to_bf16(-3.5f)), -3.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(mk::bf16_to_float(mk::float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(mk::bf16_to_float(mk::float_to_bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  EXPECT_TRUE(std::isnan(mk::bf16_to_float(mk::float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(mk::bf16_to_float(mk::float_to_bf16(INFINITY))));
}

TEST(KernelsRoutingMap, RandomIdsGiveAStablePaddedBijection) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 20; ++trial) {
    const int num_experts = std::uniform_int_distribution<int>(1, 37)(rng);
    const std::int64_t count = std::uniform_int_distribution<int>(0, 777)(rng);
    const int alignment = std::vector<int>{1, 3, 8, 16}[trial % 4];
    const auto ids = random_ids(rng, count, num_experts, trial % 3 == 0 ? 0.2 : 0.0);
    SCOPED_TRACE("experts " + std::to_string(num_experts) + " assignments " +
                 std::to_string(count) + " alignment " + std::to_string(alignment));
    expect_valid_map(ids, num_experts, alignment, build_map(ids, num_experts, alignment));
  }
}

TEST(KernelsRoutingMap, OneExpertTakesAllAndOthersAreEmpty) {
  const int num_experts = 9;
  std::vector<std::int32_t> ids(301, 4);
  const auto map = build_map(ids, num_experts, 8);
  expect_valid_map(ids, num_experts, 8, map);
  EXPECT_EQ(map.tokens_per_expert[4], 301);
  EXPECT_EQ(map.group_offsets[4], 0);
  EXPECT_EQ(map.group_offsets[5], 304);
  EXPECT_EQ(map.group_offsets[num_experts], 304);
}

TEST(KernelsRoutingMap, AllDroppedAndEmptyInputs) {
  std::vector<std::int32_t> ids(50, -1);
  auto map = build_map(ids, 4, 8);
  expect_valid_map(ids, 4, 8, map);
  EXPECT_EQ(map.group_offsets[4], 0);
  map = build_map({}, 4, 8);
  EXPECT_EQ(map.group_offsets, std::vector<std::int32_t>(5, 0));
}

TEST(KernelsPermute, PermuteThenOneHotCombineRestoresTokens) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (mk::DType dtype : {mk::DType::kFloat32, mk::DType::kBFloat16}) {
    const int num_tokens = 53, hidden = 19, top_k = 3, num_experts = 7;
    const auto ids = random_ids(rng, num_tokens * top_k, num_experts, 0.0);
    const auto map = build_map(ids, num_experts, 8);
    const std::size_t element = mk::dtype_size(dtype);
    std::vector<unsigned char> tokens(num_tokens * hidden * element);
    for (int i = 0; i < num_tokens * hidden; ++i) {
      const float value = normal(rng);
      if (dtype == mk::DType::kFloat32) {
        reinterpret_cast<float*>(tokens.data())[i] = value;
      } else {
        reinterpret_cast<std::uint16_t*>(tokens.data())[i] = mk::float_to_bf16(value);
      }
    }
    const std::int64_t capacity = static_cast<std::int64_t>(map.row_sources.size());
    std::vector<unsigned char> permuted(capacity * hidden * element, 0xAB);
    ref::permute_tokens(tokens.data(), dtype, num_tokens, hidden, top_k, map.row_sources.data(),
                        capacity, permuted.data());
    for (std::int64_t r = 0; r < capacity; ++r) {
      const std::int32_t source = map.row_sources[r];
      for (int h = 0; h < hidden; ++h) {
        const auto* out = permuted.data() + (r * hidden + h) * element;
        if (source < 0) {
          EXPECT_EQ(std::count(out, out + element, 0), static_cast<long>(element)) << "row " << r;
        } else {
          EXPECT_EQ(
              std::memcmp(out, tokens.data() + ((source / top_k) * hidden + h) * element, element),
              0);
        }
      }
    }
    // One-hot weights (j = 1) undo the permute exactly: 0 * a + 1 * b + 0 * c == b.
    std::vector<float> weights(num_tokens * top_k, 0.0f);
    for (int t = 0; t < num_tokens; ++t) weights[t * top_k + 1] = 1.0f;
    std::vector<unsigned char> restored(tokens.size(), 0xCD);
    ref::unpermute_combine(permuted.data(), dtype, weights.data(), map.destination_rows.data(),
                           num_tokens, hidden, top_k, restored.data());
    EXPECT_EQ(restored, tokens) << mk::dtype_name(dtype);
  }
}

TEST(KernelsRouter, InvariantsHoldWithBiasGroupsAndSigmoid) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (auto function : {mk::ScoreFunction::kSoftmax, mk::ScoreFunction::kSigmoid}) {
    mk::RouterConfig config;
    config.num_experts = 24;
    config.top_k = 5;
    config.num_groups = 6;
    config.group_top_k = 2;
    config.score_function = function;
    config.scaling_factor = 2.5f;
    const int num_tokens = 41;
    std::vector<float> logits(num_tokens * config.num_experts), bias(config.num_experts);
    for (auto& v : logits) v = normal(rng);
    for (auto& v : bias) v = 0.1f * normal(rng);
    std::vector<float> scores(logits.size()), weights(num_tokens * config.top_k);
    std::vector<std::int32_t> ids(num_tokens * config.top_k), counts(config.num_experts, -1);
    ref::router_forward(logits.data(), bias.data(), num_tokens, config, scores.data(), ids.data(),
                        weights.data(), counts.data());
    std::vector<std::int32_t> counted(config.num_experts, 0);
    for (int t = 0; t < num_tokens; ++t) {
      float sum = 0.0f;
      std::set<int> experts, groups;
      float previous = INFINITY;
      for (int j = 0; j < config.top_k; ++j) {
        const int e = ids[t * config.top_k + j];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, config.num_experts);
        experts.insert(e);
        groups.insert(e / (config.num_experts / config.num_groups));
        const float selection = scores[t * config.num_experts + e] + bias[e];
        EXPECT_LE(selection, previous) << "not in descending selection order";
        previous = selection;
        sum += weights[t * config.top_k + j];
        ++counted[e];
      }
      EXPECT_EQ(static_cast<int>(experts.size()), config.top_k) << "duplicate expert";
      EXPECT_LE(static_cast<int>(groups.size()), config.group_top_k);
      EXPECT_NEAR(sum, config.scaling_factor, 1e-5f);
    }
    EXPECT_EQ(counts, counted);
  }
}

TEST(KernelsRouter, NaNLogitsStillChooseKDistinctExpertsAndPoisonTheWeights) {
  mk::RouterConfig config;
  config.num_experts = 6;
  config.top_k = 3;
  std::vector<float> logits = {0.5f, NAN, 1.0f, -2.0f, NAN, 0.0f};
  std::vector<float> scores(6), weights(3);
  std::vector<std::int32_t> ids(3);
  ref::router_forward(logits.data(), nullptr, 1, config, scores.data(), ids.data(), weights.data(),
                      nullptr);
  EXPECT_EQ(std::set<std::int32_t>(ids.begin(), ids.end()).size(), 3u);
  for (std::int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 6);
  // Softmax of a row with NaN is NaN everywhere: the bad input must be visible, not hidden.
  EXPECT_TRUE(std::isnan(weights[0]));
  config.score_function = mk::ScoreFunction::kSigmoid;
  ref::router_forward(logits.data(), nullptr, 1, config, scores.data(), ids.data(), weights.data(),
                      nullptr);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{2, 0, 5}));  // NaN experts rank below every number
}

TEST(KernelsRouter, BackwardMatchesFiniteDifferences) {
  const unsigned seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (auto function : {mk::ScoreFunction::kSoftmax, mk::ScoreFunction::kSigmoid}) {
    for (bool normalize : {true, false}) {
      mk::RouterConfig config;
      config.num_experts = 11;
      config.top_k = 3;
      config.score_function = function;
      config.normalize_top_k = normalize;
      config.scaling_factor = 1.5f;
      const int e_count = config.num_experts, k = config.top_k;
      std::vector<float> logits(e_count), grad_w(k), grad_s(e_count);
      // Distinct, well-separated logits (a shuffled ladder): the +-step below never changes
      // which experts win, so the loss is differentiable there.
      std::vector<int> ladder(e_count);
      for (int e = 0; e < e_count; ++e) ladder[e] = e;
      std::shuffle(ladder.begin(), ladder.end(), rng);
      for (int e = 0; e < e_count; ++e) logits[e] = 0.37f * ladder[e] - 2.0f;
      for (auto& v : grad_w) v = normal(rng);
      for (auto& v : grad_s) v = normal(rng);
      std::vector<float> scores(e_count), weights(k), grad_logits(e_count);
      std::vector<std::int32_t> ids(k);
      ref::router_forward(logits.data(), nullptr, 1, config, scores.data(), ids.data(),
                          weights.data(), nullptr);
      ref::router_backward(scores.data(), ids.data(), grad_w.data(), grad_s.data(), 1, config,
                           grad_logits.data());
      // Loss(logits) = sum_j g_w[j] w_j + sum_e g_s[e] p_e with the selection held fixed
      // (a small step does not change which experts win, checked below).
      auto loss = [&](const std::vector<float>& x) {
        std::vector<float> s(e_count), w(k);
        std::vector<std::int32_t> chosen(k);
        ref::router_forward(x.data(), nullptr, 1, config, s.data(), chosen.data(), w.data(),
                            nullptr);
        EXPECT_EQ(chosen, ids);
        double value = 0.0;
        for (int j = 0; j < k; ++j) value += double(grad_w[j]) * w[j];
        for (int e = 0; e < e_count; ++e) value += double(grad_s[e]) * s[e];
        return value;
      };
      const float step = 1e-3f;
      for (int e = 0; e < e_count; ++e) {
        auto plus = logits, minus = logits;
        plus[e] += step;
        minus[e] -= step;
        const double numeric = (loss(plus) - loss(minus)) / (2.0 * step);
        EXPECT_NEAR(grad_logits[e], numeric, 2e-3 + 2e-2 * std::fabs(numeric)) << "logit " << e;
      }
    }
  }
}

TEST(KernelsArguments, BadInputNamesTheArgument) {
  auto expect_message = [](auto&& call, const std::string& needle) {
    try {
      call();
      ADD_FAILURE() << "no exception; expected one naming " << needle;
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  mk::RouterConfig config;
  config.num_experts = 8;
  config.top_k = 9;
  float buffer[64] = {};
  std::int32_t ids[8] = {};
  expect_message(
      [&] { ref::router_forward(buffer, nullptr, 1, config, buffer, ids, buffer, nullptr); },
      "top_k");
  config.top_k = 2;
  config.num_groups = 3;
  expect_message(
      [&] { ref::router_forward(buffer, nullptr, 1, config, buffer, ids, buffer, nullptr); },
      "num_groups");
  config.num_groups = 4;
  config.group_top_k = 1;
  config.top_k = 3;  // only 2 experts left in one group of 2
  expect_message(
      [&] { ref::router_forward(buffer, nullptr, 1, config, buffer, ids, buffer, nullptr); },
      "top_k");
  std::int32_t out[64];
  std::int32_t bad_ids[2] = {0, 5};
  expect_message([&] { ref::build_routing_map(bad_ids, 2, 4, 1, out, out, out, out, 64); },
                 "topk_ids[1]");
  expect_message([&] { ref::build_routing_map(bad_ids, 2, 4, 8, out, out, out, out, 3); },
                 "row_capacity");
  std::int32_t offsets[3] = {0, 4, 2};
  expect_message(
      [&] {
        ref::grouped_gemm(buffer, buffer, buffer, mk::DType::kFloat32, 2, offsets, 2, 2, false);
      },
      "host_group_offsets");
  expect_message([&] { ref::permute_tokens(buffer, mk::DType::kFloat32, 1, 0, 1, ids, 1, buffer); },
                 "hidden");
}

TEST(KernelsRouterConfig, EachRuleNamesTheFieldAndTheArgumentChecksAndSupportsAgree) {
  const auto config_with = [](int experts, int top_k, int groups, int group_top_k) {
    mk::RouterConfig config;
    config.num_experts = experts;
    config.top_k = top_k;
    config.num_groups = groups;
    config.group_top_k = group_top_k;
    return config;
  };
  const std::pair<mk::RouterConfig, std::string> invalid[] = {
      {config_with(0, 1, 1, 1), "num_experts must be >= 1, got 0"},
      {config_with(8, 9, 1, 1), "top_k must be in [1, num_experts=8], got 9"},
      {config_with(8, 2, 0, 1), "num_groups must be >= 1, got 0"},
      {config_with(8, 2, 3, 1), "num_groups (3) must divide num_experts (8)"},
      {config_with(8, 2, 4, 5), "group_top_k must be in [1, num_groups=4], got 5"},
      {config_with(16, 4, 8, 1), "group_top_k (1) groups of 2 experts hold fewer than top_k (4)"},
  };
  for (const auto& [config, message] : invalid) {
    EXPECT_NE(mk::router_config_error(config).find(message), std::string::npos)
        << mk::router_config_error(config);
    EXPECT_FALSE(mk::supports_router(config)) << message;
  }
  EXPECT_EQ(mk::router_config_error(config_with(16, 4, 8, 2)), "");
  EXPECT_TRUE(mk::supports_router(config_with(16, 4, 8, 2)));
}

TEST(KernelsSupports, LimitsMatchTheDocumentedOnes) {
  mk::RouterConfig deepseek;
  deepseek.num_experts = 256;
  deepseek.top_k = 8;
  deepseek.num_groups = 8;
  deepseek.group_top_k = 4;
  EXPECT_TRUE(mk::supports_router(deepseek));
  deepseek.num_experts = 2048;
  EXPECT_FALSE(mk::supports_router(deepseek));
  EXPECT_TRUE(mk::supports_routing_map(16384 * 8, 256, 8));
  EXPECT_FALSE(mk::supports_routing_map(100, 4096, 8));
  alignas(16) static float aligned[64];
  EXPECT_TRUE(
      mk::supports_grouped_gemm(mk::DType::kBFloat16, 7168, 2048, aligned, aligned, aligned));
  EXPECT_FALSE(
      mk::supports_grouped_gemm(mk::DType::kBFloat16, 7169, 2048, aligned, aligned, aligned));
  EXPECT_FALSE(
      mk::supports_grouped_gemm(mk::DType::kFloat32, 64, 64, aligned + 1, aligned, aligned));
  EXPECT_EQ(mk::grouped_mm_row_alignment(mk::DType::kBFloat16), 8);
  EXPECT_EQ(mk::routing_map_workspace_bytes(4097, 3), 3u * 3u * sizeof(std::int32_t));
#if defined(MOESCOPE_KERNELS_HAVE_CUDA)
  EXPECT_TRUE(mk::cuda_kernels_built());
#else
  EXPECT_FALSE(mk::cuda_kernels_built());
#endif
}
