// Incremental planning: starting from the running placement, experts stay where they are
// unless that unbalances a GPU beyond the bound, so far fewer weights move than with a fresh plan.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <stdexcept>

#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"
#include "placement_checks.h"

namespace moescope::balancer {
namespace {

using testing::expect_consistent_placement;
using testing::zipf_loads;

PlacementConfig make_config(int slots, int gpus, int nodes = 1, int groups = 1) {
  PlacementConfig config;
  config.num_physical_experts = slots;
  config.num_gpus = gpus;
  config.num_nodes = nodes;
  config.num_groups = groups;
  return config;
}

// The same loads with every entry scaled by a factor in [1 - noise, 1 + noise].
ExpertLoads with_noise(ExpertLoads loads, double noise, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> factor(1.0 - noise, 1.0 + noise);
  for (double& value : loads.values) value *= factor(random);
  return loads;
}

double worst_max_over_mean(const ExpertLoads& loads, const ExpertPlacement& placement) {
  double worst = 0.0;
  for (int layer = 0; layer < loads.num_layers; ++layer) {
    worst = std::max(
        worst, summarize_gpu_loads(gpu_loads_of_placement(loads.layer(layer), placement, layer))
                   .max_over_mean());
  }
  return worst;
}

TEST(IncrementalPlacement, UnchangedLoadsMoveNothing) {
  const ExpertLoads loads = zipf_loads(3, 64, 1.0, 41);
  const PlacementConfig config = make_config(80, 8);
  const ExpertPlacement current = plan_expert_placement(loads, config);
  ASSERT_LE(worst_max_over_mean(loads, current), config.incremental_max_over_mean);
  const ExpertPlacement next = plan_expert_placement_incremental(loads, config, current);
  expect_consistent_placement(next, config, 3, 64);
  EXPECT_TRUE(plan_expert_migration(current, next).moves.empty());
  EXPECT_NEAR(worst_max_over_mean(loads, next), worst_max_over_mean(loads, current), 1e-12);
}

TEST(IncrementalPlacement, NoisyLoadsMoveFewExpertsAndStayWithinTheBound) {
  for (const auto& [experts, gpus, slots] : {std::tuple{64, 8, 80}, std::tuple{256, 64, 320}}) {
    SCOPED_TRACE("experts " + std::to_string(experts) + " gpus " + std::to_string(gpus));
    const ExpertLoads before = zipf_loads(4, experts, 1.0, 51);
    const ExpertLoads after = with_noise(before, 0.1, 52);
    const PlacementConfig config = make_config(slots, gpus);
    const ExpertPlacement current = plan_expert_placement(before, config);
    const ExpertPlacement fresh = plan_expert_placement(after, config);
    const ExpertPlacement incremental = plan_expert_placement_incremental(after, config, current);
    expect_consistent_placement(incremental, config, 4, experts);

    const size_t fresh_moves = plan_expert_migration(current, fresh).moves.size();
    const size_t incremental_moves = plan_expert_migration(current, incremental).moves.size();
    EXPECT_LT(incremental_moves * 2, fresh_moves)
        << "incremental " << incremental_moves << " moves, fresh plan " << fresh_moves;
    EXPECT_LE(worst_max_over_mean(after, incremental), config.incremental_max_over_mean + 1e-9);
    EXPECT_LT(worst_max_over_mean(after, current), 2.0) << "sanity: the noise is mild";
  }
}

TEST(IncrementalPlacement, ATighterBoundBalancesBetterAndMovesMore) {
  const ExpertLoads before = zipf_loads(4, 64, 1.0, 61);
  const ExpertLoads after = with_noise(before, 0.2, 62);
  PlacementConfig loose = make_config(80, 8);
  loose.incremental_max_over_mean = 1.10;
  PlacementConfig tight = loose;
  tight.incremental_max_over_mean = 1.0;
  const ExpertPlacement current = plan_expert_placement(before, loose);
  const ExpertPlacement loose_plan = plan_expert_placement_incremental(after, loose, current);
  const ExpertPlacement tight_plan = plan_expert_placement_incremental(after, tight, current);
  EXPECT_LE(worst_max_over_mean(after, loose_plan), 1.10 + 1e-9);
  EXPECT_LE(worst_max_over_mean(after, tight_plan), worst_max_over_mean(after, loose_plan));
  EXPECT_LE(plan_expert_migration(current, loose_plan).moves.size(),
            plan_expert_migration(current, tight_plan).moves.size());
}

TEST(IncrementalPlacement, FromTheIdentityLayoutToRedundantSlots) {
  const ExpertLoads loads = zipf_loads(2, 32, 1.0, 71);
  const PlacementConfig config = make_config(40, 4);
  const ExpertPlacement current = make_identity_placement(2, 32, 4);
  const ExpertPlacement next = plan_expert_placement_incremental(loads, config, current);
  expect_consistent_placement(next, config, 2, 32);
  EXPECT_LE(worst_max_over_mean(loads, next), config.incremental_max_over_mean + 1e-9);
  EXPECT_LT(plan_expert_migration(current, next).moves.size(),
            plan_expert_migration(current, plan_expert_placement(loads, config)).moves.size());
}

TEST(IncrementalPlacement, HierarchicalKeepsGroupsOnOneNode) {
  const int experts = 64, groups = 8, nodes = 4, gpus = 16, slots = 96;
  const PlacementConfig config = make_config(slots, gpus, nodes, groups);
  const ExpertLoads before = zipf_loads(2, experts, 0.8, 81);
  const ExpertPlacement current = plan_expert_placement(before, config);
  const ExpertPlacement next =
      plan_expert_placement_incremental(with_noise(before, 0.1, 82), config, current);
  ASSERT_EQ(next.policy, PlacementPolicy::kHierarchical);
  expect_consistent_placement(next, config, 2, experts);
  const int slots_per_node = slots / nodes;
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<int> node_of_group(groups, -1);
    const auto phy2log = next.phy2log(layer);
    for (int slot = 0; slot < slots; ++slot) {
      const int group = phy2log[static_cast<size_t>(slot)] / (experts / groups);
      if (node_of_group[static_cast<size_t>(group)] < 0) {
        node_of_group[static_cast<size_t>(group)] = slot / slots_per_node;
      }
      EXPECT_EQ(node_of_group[static_cast<size_t>(group)], slot / slots_per_node);
    }
  }
  EXPECT_LT(plan_expert_migration(current, next, nodes).moves.size(),
            plan_expert_migration(current,
                                  plan_expert_placement(with_noise(before, 0.1, 82), config), nodes)
                .moves.size());
}

TEST(IncrementalPlacement, RejectsAMismatchedCurrentPlacement) {
  const ExpertLoads loads = zipf_loads(2, 16, 1.0, 91);
  const PlacementConfig config = make_config(16, 4);
  auto expect_error = [&](const ExpertPlacement& current, const PlacementConfig& used,
                          const std::string& text) {
    try {
      plan_expert_placement_incremental(loads, used, current);
      ADD_FAILURE() << "no error; expected '" << text << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
  };
  expect_error(make_identity_placement(1, 16, 4), config, "does not match the loads");
  expect_error(make_identity_placement(2, 16, 8), config, "does not match the loads");
  ExpertPlacement broken = make_identity_placement(2, 16, 4);
  broken.physical_to_logical[3] = 99;
  expect_error(broken, config, "holds logical expert 99");
  PlacementConfig bad_bound = config;
  bad_bound.incremental_max_over_mean = 0.5;
  expect_error(make_identity_placement(2, 16, 4), bad_bound, "incremental_max_over_mean");
}

}  // namespace
}  // namespace moescope::balancer
