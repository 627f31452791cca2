// Invariants every placement must satisfy, and Zipf-skewed test loads. Shared by the balancer
// tests; written independently of the planner's code so that it checks it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer::testing {

/// Loads proportional to 1 / rank^exponent, ranks shuffled over the experts, one row per layer.
inline ExpertLoads zipf_loads(int num_layers, int num_experts, double exponent, uint32_t seed) {
  ExpertLoads loads;
  loads.num_layers = num_layers;
  loads.num_experts = num_experts;
  std::mt19937 random(seed);
  for (int layer = 0; layer < num_layers; ++layer) {
    std::vector<int> rank(static_cast<size_t>(num_experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), random);
    for (int expert = 0; expert < num_experts; ++expert) {
      loads.values.push_back(10000.0 / std::pow(rank[static_cast<size_t>(expert)], exponent));
    }
  }
  return loads;
}

/// Checks phy2log, log2phy and logcnt against each other and the configuration.
inline void expect_consistent_placement(const ExpertPlacement& placement,
                                        const PlacementConfig& config, int num_layers,
                                        int num_experts) {
  ASSERT_EQ(placement.num_layers, num_layers);
  ASSERT_EQ(placement.num_logical_experts, num_experts);
  ASSERT_EQ(placement.num_physical_experts, config.num_physical_experts);
  ASSERT_EQ(placement.num_gpus, config.num_gpus);
  ASSERT_EQ(config.num_physical_experts % config.num_gpus, 0);
  ASSERT_EQ(placement.slots_per_gpu() * config.num_gpus, config.num_physical_experts);
  ASSERT_EQ(placement.physical_to_logical.size(),
            static_cast<size_t>(num_layers) * config.num_physical_experts);
  ASSERT_EQ(placement.logical_replica_count.size(), static_cast<size_t>(num_layers) * num_experts);
  ASSERT_EQ(placement.logical_to_physical.size(),
            static_cast<size_t>(num_layers) * num_experts * placement.max_replicas);
  for (int layer = 0; layer < num_layers; ++layer) {
    const auto phy2log = placement.phy2log(layer);
    const auto logcnt = placement.logcnt(layer);
    std::vector<int> seen(static_cast<size_t>(num_experts), 0);
    for (int32_t expert : phy2log) {
      ASSERT_GE(expert, 0) << "layer " << layer << ": a slot holds no expert";
      ASSERT_LT(expert, num_experts);
      ++seen[static_cast<size_t>(expert)];
    }
    int total = 0;
    for (int expert = 0; expert < num_experts; ++expert) {
      const int count = logcnt[static_cast<size_t>(expert)];
      EXPECT_GE(count, 1) << "layer " << layer << " expert " << expert << " has no replica";
      EXPECT_LE(count, placement.max_replicas);
      EXPECT_EQ(count, seen[static_cast<size_t>(expert)])
          << "layer " << layer << " expert " << expert << ": logcnt disagrees with phy2log";
      total += count;
      const auto slots = placement.log2phy(layer, expert);
      std::set<int32_t> distinct;
      for (int r = 0; r < placement.max_replicas; ++r) {
        const int32_t slot = slots[static_cast<size_t>(r)];
        if (r < count) {
          ASSERT_GE(slot, 0) << "layer " << layer << " expert " << expert << " replica " << r;
          ASSERT_LT(slot, config.num_physical_experts);
          EXPECT_EQ(phy2log[static_cast<size_t>(slot)], expert)
              << "log2phy points at a slot of another expert";
          distinct.insert(slot);
        } else {
          EXPECT_EQ(slot, -1) << "log2phy must be -1 padded past logcnt";
        }
      }
      EXPECT_EQ(static_cast<int>(distinct.size()), count) << "replicas share a slot";
    }
    EXPECT_EQ(total, config.num_physical_experts) << "slot counts do not add up";
  }
}

}  // namespace moescope::balancer::testing
