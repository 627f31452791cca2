// ExpertSlots: which logical expert each physical expert slot of one MoE layer holds, as the
// tensors routing needs (EPLB's phy2log, log2phy and logcnt for one layer, on the device).
//
// The layer holds S = num_experts + num_redundant_experts slots, S / ep_size on each rank,
// GPU-major like the planner numbers them:
//
//   slots:  [ rank 0: slot 0 .. slot S/ep-1 | rank 1: ... | ... ]
//   replicas_of_expert [E, max_replicas] int64 slot ids, -1 padded; replica_count [E] int64
//
// The n-th assignment (in token order) to logical expert e goes to its replica
// (n + rank) % count[e]: a replicated expert's rows are split evenly among its replicas.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::runtime {

class ExpertSlots {
 public:
  ExpertSlots() = default;
  /// Layer `layer` of `placement`, whose GPUs are the ranks of the expert-parallel group.
  /// Tensors are built on `device`.
  ExpertSlots(const balancer::ExpertPlacement& placement, int layer, const at::Device& device);

  /// The placement a layer starts with: one slot per expert split contiguously over the ranks
  /// when there are no redundant slots; otherwise the planner's placement for uniform loads.
  static balancer::ExpertPlacement initial_placement(int64_t num_experts, int64_t num_slots,
                                                     int64_t ep_size);

  /// top_k_indices [T, K] logical experts -> [T, K] slots. Identity placements return the input.
  at::Tensor route_to_slots(const at::Tensor& top_k_indices, int64_t rank) const;

  /// The logical expert of each of `rank`'s slots: [S / ep_size].
  std::vector<int32_t> local_slot_experts(int64_t rank) const;
  /// For each of `rank`'s slots, the index of its expert among the replicated experts (those
  /// with more than one replica, in expert order), or -1: [S / ep_size].
  std::vector<int64_t> local_replica_group(int64_t rank) const;
  /// Experts with more than one replica.
  int64_t num_replicated_experts() const { return num_replicated_experts_; }

  /// The one-layer placement (GPUs = ranks).
  const balancer::ExpertPlacement& placement() const { return placement_; }
  bool is_identity() const { return is_identity_; }
  int64_t num_slots() const { return placement_.num_physical_experts; }
  int64_t slots_per_rank() const { return placement_.slots_per_gpu(); }
  const at::Tensor& replica_count() const { return replica_count_; }  // [E] int64

 private:
  balancer::ExpertPlacement placement_;
  at::Tensor replicas_of_expert_;  // [E, max_replicas] int64
  at::Tensor replica_count_;       // [E] int64
  bool is_identity_ = true;
  int64_t num_replicated_experts_ = 0;
};

/// Layer `layer` of a multi-layer placement as a one-layer placement.
balancer::ExpertPlacement placement_layer(const balancer::ExpertPlacement& placement, int layer);

}  // namespace moescope::runtime
