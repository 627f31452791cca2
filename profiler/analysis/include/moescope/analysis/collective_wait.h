// Wait vs transfer inside every collective: a collective cannot move bytes before the last rank
// arrives, so the time a rank spends in it splits into waiting (from its own entry to the last
// rank's entry) and transfer (from the last entry to its own completion).
//
// Matching: the same op on every rank of a communicator is found by (comm_id, sequence number);
// where a communicator's sequence numbers do not tell its ops apart (the runtime writes none)
// by the op's position in that communicator on each rank, and then only when the ranks agree on
// the op's kind and step. An op is counted only when every rank that has the communicator has
// its partner, with a completion time. Entry = CommOp::start (the host call for CPU/Gloo
// collectives, the kernel start on a GPU): one global clock after clock alignment.
//   wait(r)     = clamp(max over ranks of entry - entry(r), 0, duration(r))
//   transfer(r) = duration(r) - wait(r)
// Per step: over the ops that start inside a step of the rank (all ops when it has no steps,
// then counted as one step), divided by the rank's steps.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct RankCollectiveWait {
  int32_t rank = 0;
  uint32_t ops = 0;                               // matched ops of this rank
  double wait_ms = 0, transfer_ms = 0;            // per step
  double mean_wait_ms = 0, mean_transfer_ms = 0;  // per op
  uint32_t arrived_last = 0;                      // ops this rank was the last to enter
  // Per step, the mean over the other ranks of the time they waited for this rank in the ops it
  // entered last: the waiting this rank causes.
  double caused_wait_ms = 0;
};

struct CollectiveKindWait {
  uint32_t kind = 0;                      // moescope_comm_kind
  uint32_t matched_ops = 0;               // ops matched across ranks (one per op, not per rank)
  uint32_t unmatched_ops = 0;             // rank ops with no partner on some rank (left out)
  std::vector<RankCollectiveWait> ranks;  // sorted by rank
  // Per step (known_steps order, steps of any rank): mean over the ranks that have the step.
  std::vector<int64_t> steps;
  std::vector<double> wait_ms, transfer_ms;  // [steps]
};

struct CollectiveWaits {
  std::vector<CollectiveKindWait> kinds;  // largest total wait first
  // Summed over kinds, per rank (sorted by rank): per-step times and the waiting each rank
  // causes (mean_wait_ms / mean_transfer_ms stay 0: a mean over kinds means nothing).
  std::vector<RankCollectiveWait> ranks;
  bool empty() const { return kinds.empty(); }
  // The rank's totals over kinds (a zero entry when absent).
  RankCollectiveWait of_rank(int32_t rank) const;
};

CollectiveWaits analyze_collective_waits(const TraceModel& model);

}  // namespace moescope::analysis
