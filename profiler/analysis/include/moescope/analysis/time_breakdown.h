// Where each rank's step time goes. Per rank and step, the step interval is split into
// exclusive parts: compute, communication not hidden behind compute ("exposed"), memcpy not
// hidden behind either, and idle; overlapped communication is reported beside them.
//
//   communication = comm ops [start, end] of every communicator, plus GPU kernels named nccl*
//   memcpy        = GPU memcpy/memset ops
//   compute       = GPU kernels that are not communication; on a rank with no GPU kernels
//                   (CPU runs), CPU spans except the step ranges themselves, minus communication
//   host sync     = time the host waited in device/stream/event synchronizations
//
// With no detected steps the whole trace of each rank is one step (step = -1).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct StepBreakdown {
  int32_t rank = 0;
  int64_t step = -1;
  TimeNs start = 0, end = 0;
  double step_ms = 0;
  double compute_ms = 0;
  double communication_ms = 0;  // all communication time (exposed + overlapped)
  double exposed_communication_ms = 0;
  double overlapped_communication_ms = 0;
  double memcpy_ms = 0;  // exposed memcpy (not under compute or communication)
  double idle_ms = 0;
  double host_sync_ms = 0;  // host blocked in synchronizations (may overlap the above)
  uint32_t host_syncs = 0;
  uint32_t blocking_d2h_copies = 0;  // DtoH copies while the host waited in a sync
  double launch_gap_ms = 0;          // GPU idle waiting for late kernel launches
  uint32_t allocations = 0;
  uint64_t allocated_bytes = 0;
  double busy_ms() const { return step_ms - exposed_communication_ms - idle_ms; }
};

struct RankBreakdown {
  int32_t rank = 0;
  std::vector<StepBreakdown> steps;
  StepBreakdown total;         // sums over steps (step_ms etc. summed; step = -1)
  StepBreakdown mean() const;  // per-step means
};

// The same step on every rank: how far apart the ranks are.
struct StepSpread {
  int64_t step = 0;
  double min_ms = 0, max_ms = 0, mean_ms = 0;
  int32_t slowest_rank = 0;  // by busy time (compute + exposed memcpy)
  double max_busy_ms = 0, median_busy_ms = 0;
};

struct TimeBreakdown {
  std::vector<RankBreakdown> ranks;  // model process order
  std::vector<StepSpread> spread;    // steps present on every rank
  // The mean over the ranks of their per-step means (rank -1; all 0 without ranks).
  StepBreakdown mean_over_ranks() const;
};

TimeBreakdown compute_time_breakdown(const TraceModel& model);

// One process's part of it (its steps, or the whole trace as step -1 without steps).
RankBreakdown compute_rank_breakdown(const TraceModel& model, const ProcessTrack& process);
// The spread of the steps every rank has, from the ranks' parts; has_steps[i]: ranks[i] came
// from detected steps (a rank without them takes part in no step).
std::vector<StepSpread> compute_step_spread(const std::vector<RankBreakdown>& ranks,
                                            const std::vector<bool>& has_steps);

// Each numbered step (step >= 0) with every rank's breakdown of it, in rank order. Points into
// `breakdown`, which must outlive the map.
std::map<int64_t, std::vector<const StepBreakdown*>> steps_by_number(
    const TimeBreakdown& breakdown);

// A number per step: [steps] values, in step order.
struct StepSeries {
  std::vector<int64_t> steps;
  std::vector<double> values;  // [steps]
};

// Each numbered step's `part` (ms), the mean over the ranks that have the step: the per-step
// series `moescope diff` compares and the rebalancer replay weighs its decisions by.
StepSeries mean_over_ranks_by_step(const TimeBreakdown& breakdown, double StepBreakdown::*part);
// The same from steps_by_number's map, for callers that take several parts of one breakdown.
StepSeries mean_over_ranks_by_step(
    const std::map<int64_t, std::vector<const StepBreakdown*>>& by_step,
    double StepBreakdown::*part);

// Exclusive breakdown of one process over [t0, t1) (used per step and by tests).
StepBreakdown breakdown_interval(const TraceModel& model, const ProcessTrack& process, TimeNs t0,
                                 TimeNs t1);

}  // namespace moescope::analysis
