// HostTensorCache: blocks come back only when nothing references them, and the experts that
// use it still compute the right gradients when several forwards wait for one backward.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "moe_reference.h"
#include "moescope/runtime/host_tensor_cache.h"
#include "moescope/runtime/moe_layer.h"

namespace moescope::runtime {
namespace {

using testing::small_config;

constexpr int64_t kMiB = 1 << 20;

TEST(HostTensorCache, ReusesABlockOnceNothingReferencesIt) {
  HostTensorCache cache(64 * kMiB, kMiB);
  at::Tensor first = cache.empty({1024, 256}, at::kFloat);  // 1 MiB
  EXPECT_EQ(first.sizes(), at::IntArrayRef({1024, 256}));
  EXPECT_EQ(first.scalar_type(), at::kFloat);
  EXPECT_TRUE(first.is_contiguous());
  void* address = first.data_ptr();
  first.reset();
  const at::Tensor second = cache.empty({512, 512}, at::kFloat);
  EXPECT_EQ(second.data_ptr(), address);
  const HostTensorCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.cached_blocks, 1);
  EXPECT_EQ(stats.cached_bytes, kMiB + kMiB / 8);
}

TEST(HostTensorCache, NeverHandsOutABlockSomethingStillViews) {
  HostTensorCache cache(64 * kMiB, kMiB);
  at::Tensor tensor = cache.empty({1024, 256}, at::kFloat);
  tensor.fill_(7.0f);
  const at::Tensor saved = tensor.narrow(0, 10, 5);  // e.g. what autograd keeps for backward
  tensor.reset();
  at::Tensor other = cache.empty({1024, 256}, at::kFloat);
  other.fill_(-1.0f);
  EXPECT_EQ(saved.min().item<float>(), 7.0f);
  EXPECT_EQ(saved.max().item<float>(), 7.0f);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().hits, 0);
}

TEST(HostTensorCache, PicksTheSmallestFreeBlockThatFitsWithinItsHeadroom) {
  HostTensorCache cache(64 * kMiB, kMiB);
  at::Tensor small = cache.empty({kMiB}, at::kByte);
  at::Tensor large = cache.empty({4 * kMiB}, at::kByte);
  void* small_address = small.data_ptr();
  void* large_address = large.data_ptr();
  small.reset();
  large.reset();
  // 1 MiB + 1/16 fits the 1 MiB block's 1/8 headroom.
  at::Tensor slightly_larger = cache.empty({kMiB + kMiB / 16}, at::kByte);
  EXPECT_EQ(slightly_larger.data_ptr(), small_address);
  const at::Tensor two_mib = cache.empty({2 * kMiB}, at::kByte);
  EXPECT_EQ(two_mib.data_ptr(), large_address);
  EXPECT_EQ(cache.stats().cached_blocks, 2);
}

TEST(HostTensorCache, SmallRequestsAndRequestsPastTheCapAreNotCached) {
  HostTensorCache cache(3 * kMiB, kMiB);
  const at::Tensor small = cache.empty({100}, at::kFloat);
  EXPECT_EQ(cache.stats().uncached, 1);
  at::Tensor first = cache.empty({2 * kMiB}, at::kByte);     // block of 2.25 MiB
  const at::Tensor second = cache.empty({kMiB}, at::kByte);  // would pass 3 MiB: uncached
  HostTensorCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.uncached, 2);
  EXPECT_EQ(stats.cached_bytes, 2 * kMiB + kMiB / 4);
  // Once the first is free, a request that does not fit it drops it to make room.
  first.reset();
  const at::Tensor third = cache.empty({kMiB * 5 / 2}, at::kByte);
  stats = cache.stats();
  EXPECT_EQ(stats.cached_blocks, 1);
  EXPECT_EQ(stats.cached_bytes, kMiB * 5 / 2 + kMiB * 5 / 16);
  cache.set_max_cached_bytes(0);
  EXPECT_EQ(cache.stats().cached_blocks, 1);  // still held by `third`
  EXPECT_EQ(cache.empty({2 * kMiB}, at::kByte).numel(), 2 * kMiB);
  EXPECT_EQ(cache.stats().uncached, 3);
}

TEST(HostTensorCache, BadSizesAreErrors) {
  EXPECT_THROW(HostTensorCache(-1), c10::Error);
  HostTensorCache cache(kMiB);
  EXPECT_THROW(cache.empty({-2, 3}, at::kFloat), c10::Error);
}

// Two forwards saved for one backward must not share cached blocks; run one after the other,
// the second reuses the first's. Both give the gradients of the two steps computed apart.
TEST(HostTensorCache, ExpertsKeepEveryPendingForwardsTensorsApart) {
  // [R, 2F] = [4096, 1024] floats = 16 MiB: large enough for the experts' cache.
  MoEConfig config = small_config(64, 512, 4, 2);
  torch::manual_seed(21);
  MoELayer layer(config);
  ASSERT_GE(int64_t{4096} * 1024 * 4, kExpertsCacheMinBytes);
  const at::Tensor x1 = at::randn({2048, 64});
  const at::Tensor x2 = at::randn({2048, 64});
  const at::Tensor g1 = at::randn({2048, 64});
  const at::Tensor g2 = at::randn({2048, 64});
  auto gradients = [&]() {
    std::vector<at::Tensor> grads;
    for (const auto& parameter : layer->parameters()) grads.push_back(parameter.grad().clone());
    layer->zero_grad();
    return grads;
  };
  const HostTensorCacheStats before = HostTensorCache::experts().stats();
  (layer->forward(x1).output * g1).sum().backward();
  (layer->forward(x2).output * g2).sum().backward();
  const std::vector<at::Tensor> apart = gradients();
  const HostTensorCacheStats after_apart = HostTensorCache::experts().stats();
  EXPECT_GT(after_apart.hits, before.hits) << "the second step did not reuse the first's blocks";

  const at::Tensor y1 = layer->forward(x1).output;
  const at::Tensor y2 = layer->forward(x2).output;  // x1's saved tensors are still pending
  ((y1 * g1).sum() + (y2 * g2).sum()).backward();
  const std::vector<at::Tensor> together = gradients();
  ASSERT_EQ(apart.size(), together.size());
  for (size_t i = 0; i < apart.size(); ++i) {
    EXPECT_LE(testing::max_abs_diff(apart[i], together[i]), 1e-5) << "parameter " << i;
  }
}

// A block first handed out under InferenceMode (an evaluation pass) serves the next training
// step: that step's backward works and gives the gradients of a layer that never evaluated.
TEST(HostTensorCache, BlocksFromAnInferencePassServeTraining) {
  MoEConfig config = small_config(64, 512, 4, 2);  // [R, 2F] = 16 MiB: cached
  torch::manual_seed(23);
  MoELayer evaluated(config);
  torch::manual_seed(23);
  MoELayer fresh(config);
  const at::Tensor x = at::randn({2048, 64});
  HostTensorCache& cache = HostTensorCache::experts();
  cache.set_max_cached_bytes(0);  // `fresh` runs without the cache
  fresh->forward(x).output.sum().backward();
  cache.set_max_cached_bytes(kDefaultExpertsCacheBytes);
  {
    c10::InferenceMode inference;
    evaluated->forward(x);  // takes (and releases) the blocks the training step reuses
  }
  const int64_t hits_before = cache.stats().hits;
  evaluated->forward(x).output.sum().backward();
  EXPECT_GT(cache.stats().hits, hits_before);
  const auto evaluated_parameters = evaluated->parameters();
  const auto fresh_parameters = fresh->parameters();
  ASSERT_EQ(evaluated_parameters.size(), fresh_parameters.size());
  for (size_t i = 0; i < fresh_parameters.size(); ++i) {
    EXPECT_TRUE(at::equal(evaluated_parameters[i].grad(), fresh_parameters[i].grad()))
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace moescope::runtime
