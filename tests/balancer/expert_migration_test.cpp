// Migration from the running placement to a new plan: renumbering keeps experts in place, moves
// bring exactly what is missing, and the renumbered plan balances like the planned one.
#include "moescope/balancer/expert_migration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

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

std::set<int32_t> experts_on_gpu(const ExpertPlacement& placement, int layer, int gpu) {
  const auto phy2log = placement.phy2log(layer);
  const int slots = placement.slots_per_gpu();
  return std::set<int32_t>(phy2log.begin() + gpu * slots, phy2log.begin() + (gpu + 1) * slots);
}

// Applies the moves to the current placement's GPU contents and checks that every GPU then has
// every expert the new placement puts on it, and that each move was needed and possible.
void expect_moves_complete(const ExpertPlacement& current, const ExpertMigration& migration) {
  for (int layer = 0; layer < current.num_layers; ++layer) {
    std::vector<std::set<int32_t>> has(static_cast<size_t>(current.num_gpus));
    for (int gpu = 0; gpu < current.num_gpus; ++gpu) {
      has[static_cast<size_t>(gpu)] = experts_on_gpu(current, layer, gpu);
    }
    for (const ExpertMove& move : migration.moves) {
      if (move.layer != layer) continue;
      EXPECT_TRUE(experts_on_gpu(current, layer, move.from_gpu).count(move.logical_expert))
          << "layer " << layer << ": GPU " << move.from_gpu << " cannot send expert "
          << move.logical_expert;
      EXPECT_FALSE(has[static_cast<size_t>(move.to_gpu)].count(move.logical_expert))
          << "layer " << layer << ": GPU " << move.to_gpu << " receives expert "
          << move.logical_expert << " it already has";
      has[static_cast<size_t>(move.to_gpu)].insert(move.logical_expert);
    }
    for (int gpu = 0; gpu < current.num_gpus; ++gpu) {
      for (int32_t expert : experts_on_gpu(migration.placement, layer, gpu)) {
        EXPECT_TRUE(has[static_cast<size_t>(gpu)].count(expert))
            << "layer " << layer << ": GPU " << gpu << " lacks expert " << expert;
      }
    }
  }
}

std::vector<double> sorted_gpu_loads(const ExpertLoads& loads, const ExpertPlacement& placement,
                                     int layer) {
  std::vector<double> gpu = gpu_loads_of_placement(loads.layer(layer), placement, layer);
  std::sort(gpu.begin(), gpu.end());
  return gpu;
}

TEST(ExpertMigration, ARenumberedCopyOfThePlacementNeedsNoMoves) {
  const ExpertLoads loads = zipf_loads(2, 64, 1.0, 4);
  const ExpertPlacement current = plan_expert_placement(loads, make_config(80, 8));
  // Same plan with GPUs reversed and each GPU's slots rotated.
  ExpertPlacement shuffled = current;
  const int slots = current.slots_per_gpu();
  for (int layer = 0; layer < 2; ++layer) {
    const auto source = current.phy2log(layer);
    for (int gpu = 0; gpu < 8; ++gpu) {
      for (int k = 0; k < slots; ++k) {
        shuffled.physical_to_logical[static_cast<size_t>(layer * 80 + (7 - gpu) * slots + k)] =
            source[static_cast<size_t>(gpu * slots + (k + 3) % slots)];
      }
    }
  }
  const ExpertMigration migration = plan_expert_migration(current, shuffled);
  EXPECT_TRUE(migration.moves.empty());
  EXPECT_EQ(migration.slots_already_in_place, 2 * 80);
  EXPECT_EQ(migration.placement.physical_to_logical, current.physical_to_logical)
      << "renumbering must restore the running layout";
  expect_consistent_placement(migration.placement, make_config(80, 8), 2, 64);
}

TEST(ExpertMigration, MovesBringExactlyWhatIsMissingAndBalanceIsKept) {
  const ExpertLoads before = zipf_loads(3, 64, 1.0, 10);
  const ExpertLoads after = zipf_loads(3, 64, 1.2, 11);
  const PlacementConfig config = make_config(80, 8);
  const ExpertPlacement current = plan_expert_placement(before, config);
  const ExpertPlacement target = plan_expert_placement(after, config);
  const ExpertMigration migration = plan_expert_migration(current, target);
  expect_consistent_placement(migration.placement, config, 3, 64);
  expect_moves_complete(current, migration);
  for (int layer = 0; layer < 3; ++layer) {
    const std::vector<double> aligned_loads = sorted_gpu_loads(after, migration.placement, layer);
    const std::vector<double> planned_loads = sorted_gpu_loads(after, target, layer);
    for (size_t gpu = 0; gpu < planned_loads.size(); ++gpu) {
      EXPECT_NEAR(aligned_loads[gpu], planned_loads[gpu], 1e-9 * planned_loads[gpu]);
    }
    const auto aligned = migration.placement.logcnt(layer);
    const auto planned = target.logcnt(layer);
    EXPECT_TRUE(std::equal(aligned.begin(), aligned.end(), planned.begin()));
  }
  // Renumbering never does worse than taking the plan's numbering as it is.
  int64_t naive_moves = 0;
  for (int layer = 0; layer < 3; ++layer) {
    for (int gpu = 0; gpu < 8; ++gpu) {
      const auto old_experts = experts_on_gpu(current, layer, gpu);
      for (int32_t expert : experts_on_gpu(target, layer, gpu)) {
        naive_moves += old_experts.count(expert) ? 0 : 1;
      }
    }
  }
  EXPECT_LE(static_cast<int64_t>(migration.moves.size()), naive_moves);
  EXPECT_GT(migration.moves.size(), 0u);
}

TEST(ExpertMigration, FromTheIdentityLayoutToAPlanWithRedundantSlots) {
  const ExpertLoads loads = zipf_loads(1, 32, 1.0, 21);
  const ExpertPlacement current = make_identity_placement(1, 32, 4);
  const PlacementConfig config = make_config(40, 4);
  const ExpertPlacement target = plan_expert_placement(loads, config);
  const ExpertMigration migration = plan_expert_migration(current, target);
  expect_consistent_placement(migration.placement, config, 1, 32);
  expect_moves_complete(current, migration);
  // Experts that stay on their GPU keep their local index when it still exists.
  const auto old_phy2log = current.phy2log(0);
  const auto new_phy2log = migration.placement.phy2log(0);
  for (int gpu = 0; gpu < 4; ++gpu) {
    for (int k = 0; k < 8; ++k) {
      const int32_t old_expert = old_phy2log[static_cast<size_t>(gpu * 8 + k)];
      const auto on_gpu = experts_on_gpu(migration.placement, 0, gpu);
      if (on_gpu.count(old_expert)) {
        EXPECT_EQ(new_phy2log[static_cast<size_t>(gpu * 10 + k)], old_expert)
            << "GPU " << gpu << " local slot " << k;
      }
    }
  }
}

TEST(ExpertMigration, HierarchicalRenumberingKeepsGroupsOnOneNodeAndPrefersNearSources) {
  const int experts = 64, groups = 8, nodes = 4, gpus = 16, slots = 96;
  const PlacementConfig config = make_config(slots, gpus, nodes, groups);
  const ExpertPlacement current = plan_expert_placement(zipf_loads(2, experts, 1.0, 31), config);
  const ExpertPlacement target = plan_expert_placement(zipf_loads(2, experts, 1.0, 32), config);
  const ExpertMigration migration = plan_expert_migration(current, target, nodes);
  expect_consistent_placement(migration.placement, config, 2, experts);
  expect_moves_complete(current, migration);
  const int slots_per_node = slots / nodes, gpus_per_node = gpus / nodes;
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<int> node_of_group(groups, -1);
    const auto phy2log = migration.placement.phy2log(layer);
    for (int slot = 0; slot < slots; ++slot) {
      const int group = phy2log[static_cast<size_t>(slot)] / (experts / groups);
      if (node_of_group[static_cast<size_t>(group)] < 0) {
        node_of_group[static_cast<size_t>(group)] = slot / slots_per_node;
      }
      EXPECT_EQ(node_of_group[static_cast<size_t>(group)], slot / slots_per_node);
    }
  }
  // A move crosses nodes only when no GPU of the destination's node had the expert.
  for (const ExpertMove& move : migration.moves) {
    if (move.from_gpu / gpus_per_node == move.to_gpu / gpus_per_node) continue;
    const int node = move.to_gpu / gpus_per_node;
    for (int gpu = node * gpus_per_node; gpu < (node + 1) * gpus_per_node; ++gpu) {
      EXPECT_FALSE(experts_on_gpu(current, move.layer, gpu).count(move.logical_expert))
          << "expert " << move.logical_expert << " was available on node " << node;
    }
  }
}

TEST(ExpertMigration, RejectsMismatchedPlacements) {
  const ExpertPlacement eight = make_identity_placement(1, 16, 8);
  auto expect_error = [](const ExpertPlacement& a, const ExpertPlacement& b, int nodes,
                         const std::string& text) {
    try {
      plan_expert_migration(a, b, nodes);
      ADD_FAILURE() << "no error; expected '" << text << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
  };
  expect_error(eight, make_identity_placement(1, 16, 4), 1, "spans 8 GPUs, target 4");
  expect_error(eight, make_identity_placement(2, 16, 8), 1, "has 1 layers, target 2");
  expect_error(eight, make_identity_placement(1, 24, 8), 1, "16 logical experts, target 24");
  expect_error(eight, eight, 3, "num_nodes = 3 must be positive and divide num_gpus = 8");
}

}  // namespace
}  // namespace moescope::balancer
