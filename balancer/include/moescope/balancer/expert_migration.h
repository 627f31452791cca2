// From the placement the model runs with to a newly planned one: which expert weights have to
// travel between GPUs. The planner numbers GPUs and slots arbitrarily, so the new plan is first
// renumbered to keep as many experts where they already are; only what is then missing on a GPU
// is copied there from a GPU that holds it.
//
// Plain C++ (no torch). The runtime moves the weights (and optimizer state) over its process
// group; this file only decides what goes where.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {

/// One copy of an expert's weights to make before the new placement takes effect.
struct ExpertMove {
  int32_t layer = 0;
  int32_t logical_expert = 0;
  int32_t from_gpu = 0;  // holds a replica in the current placement
  int32_t to_gpu = 0;    // does not hold one yet
};

struct ExpertMigration {
  /// The target placement with its GPUs renumbered (within nodes) and each GPU's slots reordered
  /// so that experts stay where they are where possible. Balances exactly like the target.
  ExpertPlacement placement;
  /// Cross-GPU copies, ordered by layer, destination GPU, then expert. A GPU that gets several
  /// replicas of one expert receives it once (the rest are local copies).
  std::vector<ExpertMove> moves;
  /// Slots whose expert was already on the slot's GPU (no transfer needed).
  int64_t slots_already_in_place = 0;
};

/// Plans the migration from `current` to `target` (same layers, logical experts and GPUs; the
/// slot counts may differ). GPUs are only renumbered within a node, and nodes as a whole, so a
/// hierarchical plan keeps each group on one node. `num_nodes` must divide the GPU count.
/// Sources of moves prefer a GPU on the destination's node, then the one sending least so far.
/// Throws std::invalid_argument naming the mismatch.
ExpertMigration plan_expert_migration(const ExpertPlacement& current, const ExpertPlacement& target,
                                      int num_nodes = 1);

}  // namespace moescope::balancer
