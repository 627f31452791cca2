// The placement planner: EPLB's contract (phy2log / log2phy / logcnt), both policies, balance
// against a straightforward greedy written here, and errors on bad input.
#include "moescope/balancer/expert_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "placement_checks.h"

namespace moescope::balancer {
namespace {

using testing::expect_consistent_placement;
using testing::zipf_loads;

// The published greedy, written the plain quadratic way: replicas one by one to the expert with
// the highest load per replica (first on ties), then replicas heaviest first onto the lightest
// GPU that has a free slot (first on ties). Returns the per-GPU loads.
std::vector<double> reference_greedy_gpu_loads(std::span<const double> loads, int num_slots,
                                               int num_gpus) {
  const size_t num_experts = loads.size();
  std::vector<int> count(num_experts, 1);
  for (size_t slot = num_experts; slot < static_cast<size_t>(num_slots); ++slot) {
    size_t best = 0;
    for (size_t e = 1; e < num_experts; ++e) {
      if (loads[e] / count[e] > loads[best] / count[best]) best = e;
    }
    ++count[best];
  }
  std::vector<double> items;
  for (size_t e = 0; e < num_experts; ++e) {
    for (int r = 0; r < count[e]; ++r) items.push_back(loads[e] / count[e]);
  }
  std::stable_sort(items.begin(), items.end(), std::greater<>());
  const int slots_per_gpu = num_slots / num_gpus;
  std::vector<double> gpu_load(static_cast<size_t>(num_gpus), 0.0);
  std::vector<int> used(static_cast<size_t>(num_gpus), 0);
  for (double item : items) {
    int lightest = -1;
    for (int g = 0; g < num_gpus; ++g) {
      if (used[static_cast<size_t>(g)] == slots_per_gpu) continue;
      if (lightest < 0 ||
          gpu_load[static_cast<size_t>(g)] < gpu_load[static_cast<size_t>(lightest)]) {
        lightest = g;
      }
    }
    gpu_load[static_cast<size_t>(lightest)] += item;
    ++used[static_cast<size_t>(lightest)];
  }
  return gpu_load;
}

PlacementConfig make_config(int slots, int gpus, int nodes = 1, int groups = 1,
                            PlacementPolicy policy = PlacementPolicy::kAuto, bool refine = true) {
  PlacementConfig config;
  config.num_physical_experts = slots;
  config.num_gpus = gpus;
  config.num_nodes = nodes;
  config.num_groups = groups;
  config.policy = policy;
  config.refine_packing = refine;
  return config;
}

double max_over_mean_after(const ExpertLoads& loads, const ExpertPlacement& placement, int layer) {
  return summarize_gpu_loads(gpu_loads_of_placement(loads.layer(layer), placement, layer))
      .max_over_mean();
}

TEST(ExpertPlacement, OutputsAreConsistentForEveryShape) {
  struct Shape {
    int experts, slots, gpus, nodes, groups;
  };
  for (const Shape& shape :
       {Shape{16, 16, 4, 1, 1}, Shape{64, 80, 8, 1, 1}, Shape{64, 80, 8, 2, 8},
        Shape{256, 320, 64, 8, 8}, Shape{256, 320, 64, 1, 1}, Shape{12, 36, 6, 3, 3}}) {
    for (bool refine : {false, true}) {
      SCOPED_TRACE("experts " + std::to_string(shape.experts) + " slots " +
                   std::to_string(shape.slots) + " gpus " + std::to_string(shape.gpus) + " nodes " +
                   std::to_string(shape.nodes) + " refine " + std::to_string(refine));
      const ExpertLoads loads = zipf_loads(3, shape.experts, 1.0, 7);
      const PlacementConfig config = make_config(shape.slots, shape.gpus, shape.nodes, shape.groups,
                                                 PlacementPolicy::kAuto, refine);
      const ExpertPlacement placement = plan_expert_placement(loads, config);
      EXPECT_EQ(placement.max_replicas, shape.slots - shape.experts + 1);
      expect_consistent_placement(placement, config, 3, shape.experts);
    }
  }
}

TEST(ExpertPlacement, HierarchicalKeepsEachGroupWithinOneNode) {
  const int experts = 64, groups = 8, nodes = 4, gpus = 16, slots = 96;
  const ExpertLoads loads = zipf_loads(4, experts, 1.2, 11);
  const PlacementConfig config =
      make_config(slots, gpus, nodes, groups, PlacementPolicy::kHierarchical);
  const ExpertPlacement placement = plan_expert_placement(loads, config);
  ASSERT_EQ(placement.policy, PlacementPolicy::kHierarchical);
  expect_consistent_placement(placement, config, 4, experts);

  const int slots_per_node = slots / nodes;
  const int group_size = experts / groups;
  for (int layer = 0; layer < 4; ++layer) {
    std::vector<int> node_of_group(groups, -1);
    const auto phy2log = placement.phy2log(layer);
    for (int slot = 0; slot < slots; ++slot) {
      const int group = phy2log[static_cast<size_t>(slot)] / group_size;
      const int node = slot / slots_per_node;
      if (node_of_group[static_cast<size_t>(group)] < 0)
        node_of_group[static_cast<size_t>(group)] = node;
      EXPECT_EQ(node_of_group[static_cast<size_t>(group)], node)
          << "layer " << layer << ": group " << group << " spans two nodes";
    }
    for (int node = 0; node < nodes; ++node) {
      EXPECT_EQ(std::count(node_of_group.begin(), node_of_group.end(), node), groups / nodes)
          << "layer " << layer << ": node " << node << " holds the wrong number of groups";
    }
  }
}

TEST(ExpertPlacement, AutoPolicyIsHierarchicalOnlyWhenGroupsDivideIntoNodes) {
  const ExpertLoads loads = zipf_loads(1, 24, 1.0, 3);
  EXPECT_EQ(plan_expert_placement(loads, make_config(32, 8, 2, 4)).policy,
            PlacementPolicy::kHierarchical);
  EXPECT_EQ(plan_expert_placement(loads, make_config(32, 8, 2, 3)).policy,
            PlacementPolicy::kGlobal);
  EXPECT_EQ(plan_expert_placement(loads, make_config(32, 8, 2, 4, PlacementPolicy::kGlobal)).policy,
            PlacementPolicy::kGlobal);
}

TEST(ExpertPlacement, ReplicasGoToTheHighestLoadPerReplica) {
  ExpertLoads loads{1, 3, {100.0, 60.0, 1.0}};
  // 100 -> 2 replicas (50 each), 60 -> 2 (30), then 50 > 30: 100 -> 3 (33.3).
  ExpertPlacement placement = plan_expert_placement(loads, make_config(6, 1));
  EXPECT_EQ(std::vector<int32_t>(placement.logcnt(0).begin(), placement.logcnt(0).end()),
            (std::vector<int32_t>{3, 2, 1}));
  loads.values = {100.0, 10.0, 1.0};
  placement = plan_expert_placement(loads, make_config(6, 1));
  EXPECT_EQ(std::vector<int32_t>(placement.logcnt(0).begin(), placement.logcnt(0).end()),
            (std::vector<int32_t>{4, 1, 1}));
}

TEST(ExpertPlacement, HandCheckedGreedyAndRefinedPacking) {
  // Loads 8 4 2 2 on 2 GPUs with 6 slots: expert 0 gets 3 replicas of 8/3 (ties go to the lower
  // expert). Greedy: {4, 8/3, 2} = 26/3 and {8/3, 8/3, 2} = 22/3, max/mean 26/24. Swapping an
  // 8/3 with a 2 gives 8 and 8.
  const ExpertLoads loads{1, 4, {8.0, 4.0, 2.0, 2.0}};
  const ExpertPlacement greedy =
      plan_expert_placement(loads, make_config(6, 2, 1, 1, PlacementPolicy::kAuto, false));
  EXPECT_EQ(std::vector<int32_t>(greedy.logcnt(0).begin(), greedy.logcnt(0).end()),
            (std::vector<int32_t>{3, 1, 1, 1}));
  EXPECT_NEAR(max_over_mean_after(loads, greedy, 0), 26.0 / 24.0, 1e-12);
  const ExpertPlacement refined = plan_expert_placement(loads, make_config(6, 2));
  EXPECT_NEAR(max_over_mean_after(loads, refined, 0), 1.0, 1e-12);
  std::vector<double> gpu = gpu_loads_of_placement(loads.layer(0), refined, 0);
  EXPECT_NEAR(gpu[0], 8.0, 1e-12);
  EXPECT_NEAR(gpu[1], 8.0, 1e-12);
}

TEST(ExpertPlacement, BalanceOnZipfLoadsIsNoWorseThanTheGreedyReference) {
  struct Shape {
    int experts, slots, gpus;
  };
  for (double exponent : {0.8, 1.0, 1.2}) {
    for (const Shape& shape : {Shape{64, 80, 8}, Shape{64, 64, 8}, Shape{256, 320, 64},
                               Shape{256, 320, 8}, Shape{60, 72, 12}}) {
      SCOPED_TRACE("zipf " + std::to_string(exponent) + " experts " +
                   std::to_string(shape.experts) + " gpus " + std::to_string(shape.gpus));
      const ExpertLoads loads = zipf_loads(4, shape.experts, exponent, 2024);
      const ExpertPlacement greedy = plan_expert_placement(
          loads, make_config(shape.slots, shape.gpus, 1, 1, PlacementPolicy::kGlobal, false));
      const ExpertPlacement refined = plan_expert_placement(
          loads, make_config(shape.slots, shape.gpus, 1, 1, PlacementPolicy::kGlobal, true));
      for (int layer = 0; layer < 4; ++layer) {
        const double reference =
            summarize_gpu_loads(
                reference_greedy_gpu_loads(loads.layer(layer), shape.slots, shape.gpus))
                .max_over_mean();
        const double identity =
            summarize_gpu_loads(gpu_loads_without_replicas(loads.layer(layer), shape.gpus))
                .max_over_mean();
        // The heap-based greedy is the reference algorithm: same balance.
        EXPECT_NEAR(max_over_mean_after(loads, greedy, layer), reference, 1e-9);
        EXPECT_LE(max_over_mean_after(loads, refined, layer), reference + 1e-12);
        EXPECT_LT(max_over_mean_after(loads, refined, layer), identity);
      }
    }
  }
}

TEST(ExpertPlacement, HierarchicalBalanceOnZipfLoads) {
  // With groups pinned to nodes the planner cannot use every mix the global policy can, but each
  // node's share of the replicas is still packed no worse than the greedy reference would.
  const int experts = 128, groups = 16, nodes = 4, gpus = 32, slots = 160;
  const ExpertLoads loads = zipf_loads(3, experts, 1.0, 5);
  const PlacementConfig config =
      make_config(slots, gpus, nodes, groups, PlacementPolicy::kHierarchical);
  const ExpertPlacement placement = plan_expert_placement(loads, config);
  for (int layer = 0; layer < 3; ++layer) {
    const auto phy2log = placement.phy2log(layer);
    const std::vector<double> gpu = gpu_loads_of_placement(loads.layer(layer), placement, layer);
    const int slots_per_node = slots / nodes, gpus_per_node = gpus / nodes;
    for (int node = 0; node < nodes; ++node) {
      // The node's experts and their loads, replanned by the reference inside the node.
      std::vector<double> node_loads;
      std::set<int32_t> experts_of_node;
      for (int s = node * slots_per_node; s < (node + 1) * slots_per_node; ++s) {
        experts_of_node.insert(phy2log[static_cast<size_t>(s)]);
      }
      for (int32_t e : experts_of_node)
        node_loads.push_back(loads.layer(layer)[static_cast<size_t>(e)]);
      const std::vector<double> reference =
          reference_greedy_gpu_loads(node_loads, slots_per_node, gpus_per_node);
      const double node_max = *std::max_element(gpu.begin() + node * gpus_per_node,
                                                gpu.begin() + (node + 1) * gpus_per_node);
      EXPECT_LE(node_max, *std::max_element(reference.begin(), reference.end()) * (1 + 1e-12))
          << "layer " << layer << " node " << node;
    }
    EXPECT_LT(
        max_over_mean_after(loads, placement, layer),
        summarize_gpu_loads(gpu_loads_without_replicas(loads.layer(layer), gpus)).max_over_mean());
  }
}

TEST(ExpertPlacement, UniformAndIdleLoadsArePerfectlyBalanced) {
  ExpertLoads uniform{2, 32, std::vector<double>(64, 5.0)};
  const ExpertPlacement placement = plan_expert_placement(uniform, make_config(32, 8));
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_DOUBLE_EQ(max_over_mean_after(uniform, placement, layer), 1.0);
    for (int32_t count : placement.logcnt(layer)) EXPECT_EQ(count, 1);
  }
  ExpertLoads idle{1, 8, std::vector<double>(8, 0.0)};
  const PlacementConfig config = make_config(16, 4);
  const ExpertPlacement idle_placement = plan_expert_placement(idle, config);
  expect_consistent_placement(idle_placement, config, 1, 8);
  EXPECT_DOUBLE_EQ(max_over_mean_after(idle, idle_placement, 0), 1.0);
}

TEST(ExpertPlacement, IdentityPlacementSplitsExpertsContiguously) {
  const std::vector<double> loads{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(gpu_loads_without_replicas(loads, 4), (std::vector<double>{3, 7, 11, 15}));
  const GpuLoadBalance balance = summarize_gpu_loads(gpu_loads_without_replicas(loads, 4));
  EXPECT_DOUBLE_EQ(balance.max_gpu_load, 15.0);
  EXPECT_DOUBLE_EQ(balance.mean_gpu_load, 9.0);
  EXPECT_DOUBLE_EQ(balance.max_over_mean(), 15.0 / 9.0);
}

TEST(ExpertPlacement, IdentityPlacementMatchesTheLoadsWithoutReplicas) {
  const ExpertLoads loads = zipf_loads(2, 32, 1.0, 9);
  const ExpertPlacement identity = make_identity_placement(2, 32, 8);
  const PlacementConfig config = make_config(32, 8);
  expect_consistent_placement(identity, config, 2, 32);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(gpu_loads_of_placement(loads.layer(layer), identity, layer),
              gpu_loads_without_replicas(loads.layer(layer), 8));
  }
  EXPECT_THROW(make_identity_placement(2, 30, 8), std::invalid_argument);
}

TEST(ExpertPlacement, RebuildsAPlacementFromItsPhysicalToLogicalTable) {
  const ExpertLoads loads = zipf_loads(3, 32, 1.1, 13);
  const PlacementConfig config = make_config(48, 8);
  const ExpertPlacement planned = plan_expert_placement(loads, config);
  const ExpertPlacement rebuilt =
      placement_from_physical_to_logical(3, 32, 8, planned.physical_to_logical);
  expect_consistent_placement(rebuilt, config, 3, 32);
  EXPECT_EQ(rebuilt.logical_replica_count, planned.logical_replica_count);
  EXPECT_EQ(rebuilt.max_replicas, planned.max_replicas);
  for (int layer = 0; layer < 3; ++layer) {
    EXPECT_EQ(gpu_loads_of_placement(loads.layer(layer), rebuilt, layer),
              gpu_loads_of_placement(loads.layer(layer), planned, layer));
  }

  auto expect_error = [](int layers, int experts, int gpus, std::vector<int32_t> phy2log,
                         const std::string& text) {
    try {
      placement_from_physical_to_logical(layers, experts, gpus, phy2log);
      ADD_FAILURE() << "no error; expected '" << text << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
  };
  expect_error(2, 2, 1, {0, 1, 0}, "does not split into num_layers = 2");
  expect_error(1, 2, 2, {0, 1, 1}, "must be a multiple of num_gpus = 2");
  expect_error(1, 4, 2, {0, 1}, "at least the 4 logical experts");
  expect_error(1, 2, 2, {0, 5}, "layer 0 slot 1 holds expert 5");
  expect_error(2, 2, 2, {0, 1, 1, 1}, "layer 1 has no slot for expert 0");
}

void expect_invalid(const ExpertLoads& loads, const PlacementConfig& config,
                    const std::string& expected_text) {
  try {
    plan_expert_placement(loads, config);
    ADD_FAILURE() << "no error; expected one mentioning '" << expected_text << "'";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find(expected_text), std::string::npos)
        << "message: " << error.what();
  }
}

TEST(ExpertPlacement, RejectsBadInputWithMessagesNamingTheParameter) {
  const ExpertLoads loads = zipf_loads(2, 16, 1.0, 1);
  expect_invalid(loads, make_config(18, 4),
                 "num_physical_experts (slots) = 18 must be a multiple of num_gpus = 4");
  expect_invalid(loads, make_config(24, 6, 4), "num_gpus = 6 must be a multiple of num_nodes = 4");
  expect_invalid(loads, make_config(24, 4, 1, 3), "must be a multiple of num_groups = 3");
  expect_invalid(loads, make_config(12, 4), "is less than the number of logical experts (16)");
  expect_invalid(loads, make_config(16, 4, 2, 1, PlacementPolicy::kHierarchical),
                 "hierarchical policy needs num_groups (1) to be a multiple of num_nodes (2)");
  expect_invalid(loads, make_config(16, 0), "num_gpus must be positive");
  expect_invalid(loads, make_config(16, 4, 0), "num_nodes must be positive");
  expect_invalid(ExpertLoads{}, make_config(16, 4), "loads are empty");

  ExpertLoads negative = loads;
  negative.values[16 + 5] = -1.0;
  expect_invalid(negative, make_config(16, 4), "layer 1 expert 5");
  ExpertLoads not_a_number = loads;
  not_a_number.values[3] = std::numeric_limits<double>::quiet_NaN();
  expect_invalid(not_a_number, make_config(16, 4), "layer 0 expert 3");
  ExpertLoads infinite = loads;
  infinite.values[0] = std::numeric_limits<double>::infinity();
  expect_invalid(infinite, make_config(16, 4), "finite and non-negative");
  ExpertLoads short_values = loads;
  short_values.values.pop_back();
  expect_invalid(short_values, make_config(16, 4), "expected 32 (num_layers x num_experts)");
}

}  // namespace
}  // namespace moescope::balancer
