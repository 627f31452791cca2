// ReceiveCap: a per-rank limit on the rows (token copies) this rank's experts accept in one
// forward. A cold router can send most tokens of the whole expert-parallel group to one rank's
// experts in the first steps; without a limit that rank's receive buffer, activations and expert
// compute grow with the group size and the step ends in an out-of-memory crash. With the cap the
// rank either drops the excess rows (counted, and recorded by the caller) or fails fast with a
// c10::Error that names the cap and the load, by policy.
//
// Rows are the assignments routed to this rank's G local experts, e.g. the expert-contiguous
// rows of a DispatchPlan restricted to the local experts:
//   local_expert_of_row [R] int64 in [0, G)
//   row_weights         [R] floating, the router's combine weight (kDropLowestProbability)
//   row_to_token        [R] int64, the token's position in the batch (kDropLatestPosition)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "moescope/runtime/moe_config.h"

namespace moescope::runtime {

/// The policy's name in MoEConfig text ("drop_lowest_probability", "drop_latest_position",
/// "fail"); the Python binding parses the same names through it.
const char* receive_cap_policy_name(ReceiveCapPolicy policy);

struct ReceiveCapOptions {
  int64_t max_rows = 0;  // rows this rank accepts per forward, > 0
  ReceiveCapPolicy policy = ReceiveCapPolicy::kDropLowestProbability;
};

/// What apply() decided for one forward.
struct ReceiveCapResult {
  at::Tensor keep_mask;           // [R] bool, false for dropped rows
  at::Tensor rows_per_expert;     // [G] int64 rows received per local expert (before the cap)
  at::Tensor kept_per_expert;     // [G] int64 rows kept per local expert
  at::Tensor dropped_per_expert;  // [G] int64 rows dropped per local expert
  int64_t num_received_rows = 0;  // R
  int64_t num_kept_rows = 0;      // <= max_rows
  int64_t num_dropped_rows = 0;   // R - num_kept_rows
};

/// Totals over every apply() since construction.
struct ReceiveCapStats {
  int64_t forwards = 0;         // apply() calls
  int64_t capped_forwards = 0;  // calls in which rows were dropped
  int64_t received_rows = 0;
  int64_t dropped_rows = 0;
  int64_t max_received_rows = 0;  // the largest R seen
};

class ReceiveCap {
 public:
  /// Throws c10::Error naming max_rows when it is not positive.
  explicit ReceiveCap(const ReceiveCapOptions& options);

  /// Decides which rows to keep. Under the cap everything is kept. Over it, kFail throws; the
  /// drop policies keep exactly max_rows rows (ties broken by the lower row index, so the result
  /// is deterministic). Costs one host sync (R is known, the per-expert counts are read back).
  /// Throws c10::Error naming the argument on shape/dtype mismatches or expert ids outside
  /// [0, num_local_experts).
  ReceiveCapResult apply(const at::Tensor& local_expert_of_row, const at::Tensor& row_weights,
                         const at::Tensor& row_to_token, int64_t num_local_experts);

  /// Records the dropped rows of the last apply() as the counter "receive_cap.dropped_rows"
  /// (the MoE layer also reports them in its expert-load event).
  static void record(const ReceiveCapResult& result);

  const ReceiveCapOptions& options() const { return options_; }
  const ReceiveCapStats& stats() const { return stats_; }

 private:
  ReceiveCapOptions options_;
  ReceiveCapStats stats_;
};

/// Splits a rank's cap among the ranks sending to it, so every sender can apply its share
/// locally before the dispatch all-to-all (the receiver cannot drop rows it never got).
/// incoming_rows [num_source_ranks] int64 (from the counts exchange). Under the cap every source
/// keeps everything; over it each source gets floor(max_rows * incoming / total) and the rows
/// left over go one each to the largest fractional parts (ties to the lower rank). Returns
/// [num_source_ranks] int64 quotas with quota <= incoming and
/// sum(quota) == min(sum(incoming), max_rows): the same result on every rank.
at::Tensor split_receive_cap(const at::Tensor& incoming_rows, int64_t max_rows);

}  // namespace moescope::runtime
