// Moving what a layer stores per expert slot (expert weights, their gradients, their optimizer
// state) to a new placement over the expert-parallel group, between training steps.
//
// Every per-slot tensor is [S_local, ...]: row j is this rank's slot j. After the migration row j
// holds the expert the new placement puts in that slot: copied from another local slot when this
// rank already holds the expert, otherwise received from the rank plan_expert_migration chose.
// One all-to-all per tensor moves the rows; a tensor is rewritten in place, so parameters keep
// their identity (optimizers and autograd hooks still point at them).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"
#include "moescope/runtime/expert_parallel.h"

namespace moescope::runtime {

struct SlotMigrationResult {
  int64_t bytes_sent = 0;        // this rank, all tensors
  int64_t bytes_received = 0;    // this rank, all tensors
  int64_t experts_received = 0;  // experts this rank fetched from other ranks
  int64_t slots_changed = 0;     // this rank's slots that now hold another expert
};

/// Rewrites `per_slot_tensors` (each [S_local, ...], any dtype) for `migration.placement`.
/// `current` is the one-layer placement the tensors hold now, over the group's ranks; the
/// migration comes from plan_expert_migration(current, target). Every rank of the group calls
/// it together with the same placements and the same number of tensors (same shapes, dtypes).
/// Throws c10::Error naming the mismatch (slot counts, tensor shapes, an expert no move brings).
SlotMigrationResult migrate_slot_tensors(const std::vector<at::Tensor>& per_slot_tensors,
                                         const balancer::ExpertPlacement& current,
                                         const balancer::ExpertMigration& migration,
                                         const ExpertParallelGroup& group);

}  // namespace moescope::runtime
