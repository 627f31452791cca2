// Balanced packing: split weighted items into packs holding the same number of items each,
// keeping the heaviest pack as light as possible. Used three times by the placement planner
// (groups onto nodes, replicas onto GPUs, both per layer).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moescope::balancer {

struct PackAssignment {
  std::vector<int32_t> pack_of_item;  // [num_items]
  std::vector<int32_t> rank_in_pack;  // [num_items], 0 .. items_per_pack - 1
};

/// Indices of `weights`, heaviest first (ties to the lower index): [weights.size()].
std::vector<int32_t> heaviest_first(std::span<const double> weights);

/// Greedy longest-first packing as EPLB describes it: items sorted by weight (heaviest first,
/// ties by index) each go into the lightest pack that still has room (ties by pack index).
/// With `refine`, pairs of items are then swapped between the heaviest pack and another pack
/// while that strictly lowers the heaviest pack's weight.
/// Requires weights.size() % num_packs == 0 (checked by the caller).
PackAssignment balanced_packing(std::span<const double> weights, int num_packs, bool refine);

/// Packing that keeps items where they are: heaviest first, each item with a preferred pack
/// (>= 0; -1 for none) goes there while the pack has room and stays at or below
/// stop_max_over_mean x the mean pack weight; the rest are packed greedily as above, and swaps
/// then lower the heaviest pack until it is at or below that bound (or no swap helps).
/// preferred_pack: [num_items].
PackAssignment sticky_balanced_packing(std::span<const double> weights, int num_packs,
                                       std::span<const int32_t> preferred_pack,
                                       double stop_max_over_mean);

}  // namespace moescope::balancer
