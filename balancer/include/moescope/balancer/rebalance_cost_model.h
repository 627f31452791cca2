// Does a new expert placement pay for itself over the next window? The runtime's rebalancer
// (ExpertRebalancer) asks this for every layer at every decision, with the cost rates it
// measured itself; the same terms as `moescope plan`'s step-time model (analysis/
// step_cost_terms.h), per step of one layer:
//
//   gain         (busiest rank's rows before - after) x (compute ms per row x compute passes
//                + row bytes x all-to-all ms per byte x all-to-alls per step)
//                (every rank waits for the busiest one, so only its rows count)
//   replica sync all-reduces added per step x the all-reduce's fixed ms
//                + gradient bytes of the experts newly replicated x its ms per byte
//   migration    one-off: the move's bytes x the migration's ms per byte, amortised over the
//                window (the steps the placement is expected to be kept)
//   net          gain - replica sync - migration / window   (> 0: the step gets faster)
//
// Each term carries the standard error of its fit; the net's is their root sum of squares.
// The placement is applied when the net's lower 95% bound is above 0 (or, with
// decide_on_lower_bound false, the net itself).
#pragma once

#include <cstdint>

#include "moescope/balancer/running_line_fit.h"

namespace moescope::balancer {

/// Why a decision was taken; the values are moescope_rebalance_reason's (moescope/recorder.h),
/// which is what the trace holds.
enum class RebalanceReason : uint32_t {
  kUnknown = 0,               // traces written before the reason was recorded
  kPays = 1,                  // applied: the net gain's lower bound is above 0
  kCostsExceedGain = 2,       // kept: replica sync + migration cost at least the gain
  kWithinUncertainty = 3,     // kept: a net gain, but its interval reaches 0
  kBalanced = 4,              // kept: the forecast's imbalance is below the threshold, not planned
  kNoMove = 5,                // kept: the plan is the current placement
  kImbalanceRuleApplied = 6,  // RebalanceRule::kImbalanceGain: gain by imbalance beat bytes/bw
  kImbalanceRuleKept = 7,
};

/// What one rank group measured, as lines: y in ms.
struct RebalanceCostRates {
  LineEstimate compute;     // one layer forward's expert compute on one rank vs rows it received
  LineEstimate all_to_all;  // one dispatch all-to-all vs the bytes this rank received
  LineEstimate all_reduce;  // one all-reduce vs its bytes
  LineEstimate migration;   // one applied move vs the bytes it moved over the whole group
  double compute_passes_per_step = 3.0;  // forward + backward (about twice the forward)
  double all_to_alls_per_step = 4.0;     // dispatch and combine, forward and backward
  // Used where a line has no slope yet (no spread in its samples, or none at all):
  double assumed_ms_per_row = 0;             // compute + all-to-all, from the step time
  double assumed_bytes_per_ms = 10e9 / 1e3;  // migration and all-reduce bandwidth
};

/// The candidate placement of one layer against the current one.
struct RebalanceCandidate {
  double busiest_rows_before = 0;     // predicted rows per forward of the busiest rank, current
  double busiest_rows_after = 0;      // the same with the candidate placement
  double row_bytes = 0;               // bytes of one row in the all-to-all
  double sync_collectives_added = 0;  // all-reduces per step the replicas add (may be < 0)
  double sync_bytes_added = 0;        // gradient bytes of the experts newly replicated (may be < 0)
  double migration_bytes = 0;         // what the move copies over the whole group
  double window_steps = 50;           // steps the placement is expected to be kept
  bool moves = false;                 // the candidate differs from the current placement
};

struct RebalanceVerdict {
  double gain_ms = 0, gain_stderr_ms = 0;                  // per step
  double replica_sync_ms = 0, replica_sync_stderr_ms = 0;  // per step
  double migration_ms = 0, migration_stderr_ms = 0;        // once
  double window_steps = 0;
  double net_ms = 0, net_stderr_ms = 0;  // per step, gain - replica sync - migration / window
  double net_low() const { return net_ms - 1.96 * net_stderr_ms; }
  double net_high() const { return net_ms + 1.96 * net_stderr_ms; }
  bool apply = false;
  RebalanceReason reason = RebalanceReason::kUnknown;
};

/// The terms, the net and the decision of the cost rule.
RebalanceVerdict judge_rebalance(const RebalanceCostRates& rates,
                                 const RebalanceCandidate& candidate,
                                 bool decide_on_lower_bound = true);

}  // namespace moescope::balancer
