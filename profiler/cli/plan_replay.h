// `moescope plan --rebalance-every N`: predict a run that the runtime's rebalancer re-plans every
// N steps, not one placement applied once. The rebalancer's decisions are replayed on the
// recorded run's loads step by step (balancer/rebalance_replay.h), judged with the cost rates
// fitted from the same trace; the prediction then counts the busiest GPU of each step under the
// placement in force, the expert copies of every applied plan and the replicas it keeps.
#pragma once

#include <cstddef>
#include <string>

#include "moescope/analysis/step_cost_terms.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"
#include "moescope/balancer/rebalance_replay.h"
#include "plan_options.h"

namespace moescope::cli {

/// `breakdown` is the model's (its step times weigh the imbalance rule). Throws
/// std::invalid_argument when the trace has no per-step loads of every layer or no expert cost
/// can be fitted from it (the plans are judged with it).
balancer::RebalanceReplay replay_recorded_run(const analysis::TraceModel& model,
                                              const analysis::TimeBreakdown& breakdown,
                                              const PlanOptions& options);

/// What the prediction counts for the replayed rebalancer: replicas after (the mean over the
/// kept steps, rounded), the copies of every applied plan amortised over the kept steps.
void count_replay_costs(const balancer::RebalanceReplay& replay,
                        analysis::PlacementChangeCosts& costs);

/// "replayed the runtime rebalancer every 10 steps on 190 recorded steps: 7 of 38 layer
/// decisions applied, 9 expert copies".
std::string replay_note(const balancer::RebalanceReplay& replay, const PlanOptions& options);

}  // namespace moescope::cli
