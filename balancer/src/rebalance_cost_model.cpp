// The cost rule of a rebalancing decision (terms in rebalance_cost_model.h).
#include "moescope/balancer/rebalance_cost_model.h"

#include <algorithm>
#include <cmath>

namespace moescope::balancer {
namespace {

double squared(double value) {
  return value * value;
}

// ms per byte of a transfer line, else of the assumed bandwidth.
double ms_per_byte(const LineEstimate& line, double assumed_bytes_per_ms) {
  if (line.has_slope && line.slope > 0) return line.slope;
  return assumed_bytes_per_ms > 0 ? 1.0 / assumed_bytes_per_ms : 0.0;
}

}  // namespace

RebalanceVerdict judge_rebalance(const RebalanceCostRates& rates,
                                 const RebalanceCandidate& candidate, bool decide_on_lower_bound) {
  RebalanceVerdict verdict;
  verdict.window_steps = std::max(1.0, candidate.window_steps);
  const double rows_saved = candidate.busiest_rows_before - candidate.busiest_rows_after;

  // Gain: the busiest rank's rows saved, computed and sent. A fitted slope below 0 is noise
  // around a cost too small to see: it counts as 0, with its error.
  if (rates.compute.has_slope) {
    const double passes = rates.compute_passes_per_step;
    verdict.gain_ms = rows_saved * std::max(0.0, rates.compute.slope) * passes;
    verdict.gain_stderr_ms = std::abs(rows_saved) * rates.compute.slope_stderr * passes;
    if (rates.all_to_all.has_slope && candidate.row_bytes > 0) {
      const double bytes = rows_saved * candidate.row_bytes * rates.all_to_alls_per_step;
      verdict.gain_ms += bytes * std::max(0.0, rates.all_to_all.slope);
      verdict.gain_stderr_ms =
          std::hypot(verdict.gain_stderr_ms, std::abs(bytes) * rates.all_to_all.slope_stderr);
    }
  } else {
    verdict.gain_ms = rows_saved * rates.assumed_ms_per_row;  // nothing measured: no error known
  }

  // Replica sync: the all-reduce's fixed time per added collective, its bytes at its rate (or
  // twice the all-to-all's: a ring all-reduce sends each byte out and back).
  double reduce_ms_per_byte = 0, reduce_ms_per_byte_stderr = 0;
  if (rates.all_reduce.has_slope && rates.all_reduce.slope > 0) {
    reduce_ms_per_byte = rates.all_reduce.slope;
    reduce_ms_per_byte_stderr = rates.all_reduce.slope_stderr;
  } else if (rates.all_to_all.has_slope && rates.all_to_all.slope > 0) {
    reduce_ms_per_byte = 2 * rates.all_to_all.slope;
    reduce_ms_per_byte_stderr = 2 * rates.all_to_all.slope_stderr;
  } else {
    reduce_ms_per_byte = ms_per_byte(LineEstimate{}, rates.assumed_bytes_per_ms);
  }
  const double fixed_ms = rates.all_reduce.valid ? std::max(0.0, rates.all_reduce.intercept) : 0.0;
  verdict.replica_sync_ms =
      candidate.sync_collectives_added * fixed_ms + candidate.sync_bytes_added * reduce_ms_per_byte;
  verdict.replica_sync_stderr_ms =
      std::hypot(candidate.sync_collectives_added * rates.all_reduce.intercept_stderr,
                 candidate.sync_bytes_added * reduce_ms_per_byte_stderr);

  // Migration: measured moves where there are two sizes to fit, else the all-to-all's rate.
  if (candidate.moves) {
    const LineEstimate& moves = rates.migration;
    if (moves.has_slope && moves.slope > 0) {
      verdict.migration_ms = std::max(0.0, moves.at(candidate.migration_bytes));
      verdict.migration_stderr_ms =
          std::hypot(moves.intercept_stderr, candidate.migration_bytes * moves.slope_stderr);
    } else {
      verdict.migration_ms =
          candidate.migration_bytes * ms_per_byte(rates.all_to_all, rates.assumed_bytes_per_ms);
      if (moves.valid && !moves.has_slope) {
        verdict.migration_ms = std::max(verdict.migration_ms, moves.intercept);
      }
    }
  }

  verdict.net_ms =
      verdict.gain_ms - verdict.replica_sync_ms - verdict.migration_ms / verdict.window_steps;
  verdict.net_stderr_ms =
      std::sqrt(squared(verdict.gain_stderr_ms) + squared(verdict.replica_sync_stderr_ms) +
                squared(verdict.migration_stderr_ms / verdict.window_steps));
  const double decided_on = decide_on_lower_bound ? verdict.net_low() : verdict.net_ms;
  if (!candidate.moves) {
    verdict.reason = RebalanceReason::kNoMove;
  } else if (decided_on > 0) {
    verdict.apply = true;
    verdict.reason = RebalanceReason::kPays;
  } else {
    verdict.reason = verdict.net_ms > 0 ? RebalanceReason::kWithinUncertainty
                                        : RebalanceReason::kCostsExceedGain;
  }
  return verdict;
}

}  // namespace moescope::balancer
