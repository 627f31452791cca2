// Placements given rather than planned: the identity layout, and one read from a phy2log table
// (a checkpoint's, another framework's), with the inverse tables derived and checked.
#include <stdexcept>
#include <string>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {
namespace {

[[noreturn]] void fail(const std::string& message) {
  throw std::invalid_argument("expert placement: " + message);
}

}  // namespace

ExpertPlacement make_identity_placement(int num_layers, int num_experts, int num_gpus) {
  if (num_layers <= 0 || num_experts <= 0 || num_gpus <= 0 || num_experts % num_gpus != 0) {
    throw std::invalid_argument("identity placement: num_experts (" + std::to_string(num_experts) +
                                ") must be a positive multiple of num_gpus (" +
                                std::to_string(num_gpus) + ") and num_layers (" +
                                std::to_string(num_layers) + ") positive");
  }
  // Slot e holds expert e on every layer: the one layout with no replica.
  std::vector<int32_t> physical_to_logical(static_cast<size_t>(num_layers) * num_experts);
  for (size_t slot = 0; slot < physical_to_logical.size(); ++slot) {
    physical_to_logical[slot] = static_cast<int32_t>(slot % static_cast<size_t>(num_experts));
  }
  return placement_from_physical_to_logical(num_layers, num_experts, num_gpus, physical_to_logical);
}

ExpertPlacement placement_from_physical_to_logical(int num_layers, int num_logical_experts,
                                                   int num_gpus,
                                                   std::span<const int32_t> physical_to_logical) {
  if (num_layers <= 0 || num_logical_experts <= 0 || num_gpus <= 0 ||
      physical_to_logical.size() % static_cast<size_t>(num_layers) != 0) {
    fail("phy2log of " + std::to_string(physical_to_logical.size()) + " entries does not split " +
         "into num_layers = " + std::to_string(num_layers) + " layers (num_logical_experts = " +
         std::to_string(num_logical_experts) + ", num_gpus = " + std::to_string(num_gpus) + ")");
  }
  const int num_slots = static_cast<int>(physical_to_logical.size() / num_layers);
  if (num_slots % num_gpus != 0 || num_slots < num_logical_experts) {
    fail("phy2log has " + std::to_string(num_slots) + " slots per layer; they must be a multiple " +
         "of num_gpus = " + std::to_string(num_gpus) + " and at least the " +
         std::to_string(num_logical_experts) + " logical experts");
  }
  ExpertPlacement placement;
  placement.num_layers = num_layers;
  placement.num_logical_experts = num_logical_experts;
  placement.num_physical_experts = num_slots;
  placement.num_gpus = num_gpus;
  placement.max_replicas = num_slots - num_logical_experts + 1;
  placement.policy = PlacementPolicy::kGlobal;
  placement.physical_to_logical.assign(physical_to_logical.begin(), physical_to_logical.end());
  placement.logical_replica_count.assign(static_cast<size_t>(num_layers) * num_logical_experts, 0);
  placement.logical_to_physical.assign(
      static_cast<size_t>(num_layers) * num_logical_experts * placement.max_replicas, -1);
  for (int layer = 0; layer < num_layers; ++layer) {
    int32_t* logcnt =
        placement.logical_replica_count.data() + static_cast<size_t>(layer) * num_logical_experts;
    int32_t* log2phy = placement.logical_to_physical.data() +
                       static_cast<size_t>(layer) * num_logical_experts * placement.max_replicas;
    for (int slot = 0; slot < num_slots; ++slot) {
      const int32_t expert =
          physical_to_logical[static_cast<size_t>(layer) * num_slots + static_cast<size_t>(slot)];
      if (expert < 0 || expert >= num_logical_experts) {
        fail("phy2log of layer " + std::to_string(layer) + " slot " + std::to_string(slot) +
             " holds expert " + std::to_string(expert) + ", outside [0, " +
             std::to_string(num_logical_experts) + ")");
      }
      // Every expert has a slot (checked below), so no expert can exceed max_replicas.
      const int32_t rank = logcnt[expert]++;
      if (rank < placement.max_replicas) {
        log2phy[static_cast<size_t>(expert) * placement.max_replicas + rank] = slot;
      }
    }
    for (int expert = 0; expert < num_logical_experts; ++expert) {
      if (logcnt[expert] == 0) {
        fail("phy2log of layer " + std::to_string(layer) + " has no slot for expert " +
             std::to_string(expert));
      }
    }
  }
  return placement;
}

}  // namespace moescope::balancer
