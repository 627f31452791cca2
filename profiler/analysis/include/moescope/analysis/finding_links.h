// Causal links between findings, the time attributed along them and the ranking by root cause.
//
// The chain a skewed router makes under expert parallelism:
//   expert_imbalance (layer L, hot experts H)
//     -> straggler_rank (rank R)         when R computes the most rows of layer L (at least
//                                        kMinRankExcessShare over the others' median) and hosts
//                                        H, as the trace shows it (expert_placement_seen.h)
//     -> exposed_communication           when the other ranks wait for R inside collectives at
//                                        least kMinCausedWaitMs per step (collective_wait.h)
// Time: the imbalance carries the straggler's time its rows cause, ms_per_row x R's rows over
// the others' median (the cost model of placement_prediction.h; without a valid model the
// straggler's whole excess), split over the linked layers by their excess rows and capped at the
// straggler's excess; its est_ms_per_step becomes the larger of that and its own estimate.
// Ranking: chains by the largest estimate in the chain, the root first, its effects after it;
// then ids are the 1-based positions. Without received rows the imbalance's chain stops at the
// layer and its `chain` says so; a straggler with no expert cause says what else the trace
// shows (host synchronization, a data loader or GC span, or only slower compute).
#pragma once

#include <string>
#include <vector>

#include "moescope/analysis/collective_wait.h"
#include "moescope/analysis/findings.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

inline constexpr double kMinCausedWaitMs = 0.5;
// The busiest rank of the layer must compute at least this share more rows than the others'
// median for the imbalance to single it out (below it the rows are even over the ranks).
inline constexpr double kMinRankExcessShare = 0.10;

// The first finding's chain on one line, for the report's and the viewer's first screen:
// "#1 expert_imbalance (layer 1, experts 1,2; 20.74 ms/step) -> #2 straggler_rank (rank 0) ->
// #3 exposed_communication", following the first finding each one explains; a root that
// explains nothing adds its chain sentence. "" without findings.
std::string root_cause_line(const std::vector<Finding>& findings);

void link_findings(const TraceModel& model, const TimeBreakdown& breakdown,
                   const CollectiveWaits& waits, std::vector<Finding>& findings);

}  // namespace moescope::analysis
