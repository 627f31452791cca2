// Across ranks: who is slow, since when, and on which host.
//
//   straggler map  per rank and step (steps every rank has): busy time (step - exposed
//                  communication - idle) and the time the other ranks waited for this rank:
//                  collectives are matched across ranks by (communicator, sequence number);
//                  the rank that entered last is waited for by each other member for
//                  (last entry - its entry); the mean of those waits is booked on the last
//                  rank, in the step its entry falls in.
//   onset          per rank, its busy time over the step's median busy time across ranks; a
//                  single change point (the split of the series that best separates two means)
//                  where the later mean is >= kOnsetMinSlowdown above the earlier one and the
//                  shift is >= kOnsetMinScore standard errors (>= 3 ranks, >= 8 steps): "rank 517
//                  slower by 18% from step 1,200".
//   hosts          ranks grouped by host name; a host whose ranks' median busy ratio (over all
//                  steps) is >= kHostMinSlowdown above the median host's is a slow host.
// Memory and time grow with ranks x steps and the collectives, never with events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/findings.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

inline constexpr double kOnsetMinSlowdown = 0.05;
inline constexpr double kOnsetMinScore = 8.0;
inline constexpr size_t kOnsetMinSteps = 8;  // fewer steps: no onset is looked for
inline constexpr size_t kOnsetMinRanks = 3;  // fewer ranks: no onset is looked for
inline constexpr double kHostMinSlowdown = 0.05;

struct StragglerMap {
  std::vector<int32_t> ranks;         // model process order
  std::vector<int64_t> steps;         // the steps every rank has, ascending
  std::vector<double> busy_ms;        // [ranks x steps]
  std::vector<double> waited_for_ms;  // [ranks x steps]
};

struct SlowdownOnset {
  int32_t rank = 0;
  std::string host;
  int64_t step = 0;     // first slow step
  double slowdown = 0;  // later mean busy ratio / earlier one - 1
  double score = 0;     // shift in standard errors
  double extra_ms = 0;  // busy ms per step added after the onset (the step's median busy)
};

struct HostSpeed {
  std::string host;
  std::vector<int32_t> ranks;
  double busy_ratio = 1;  // median over its ranks of their busy / the step's median busy
};

struct CrossRankAnalysis {
  StragglerMap map;
  std::vector<SlowdownOnset> onsets;  // largest slowdown first
  std::vector<HostSpeed> hosts;       // slowest first
  std::vector<HostSpeed> slow_hosts;  // the hosts past kHostMinSlowdown
};

CrossRankAnalysis analyze_cross_rank(const TraceModel& model, const TimeBreakdown& breakdown);

// Adds the findings slowdown_onset and slow_host (docs/analysis.md) to `findings`, keeps them
// ranked by est_ms_per_step, and returns the analysis in `out` when given.
void add_cross_rank_findings(const TraceModel& model, const TimeBreakdown& breakdown,
                             std::vector<Finding>& findings, CrossRankAnalysis* out = nullptr);

}  // namespace moescope::analysis
