// Every cost a new expert placement adds to or takes from a training step, fitted from a trace,
// and whether the change pays for its move (`moescope plan`'s prediction and --advise).
//
// Terms (ms per step; each with a standard error from its fit; the net change is their sum,
// its interval net +- 1.96 x sqrt(sum of squared errors)):
//   expert compute      ms_per_row x sum over layers of (max_g rows_after - max_r rows_before)
//                       (placement_prediction.h: every rank waits for the busiest one)
//   all-to-all          the same row change x all-to-all bytes per received row (every byte of
//                       the trace's all-to-alls over every received row: dispatch, combine and
//                       their backward) x the fitted transfer ms per byte
//   replica grad sync   per layer: (collectives added, sync_collectives_per_layer when a layer
//                       gains its first replica) x the all-reduce's fixed ms + (replicated experts
//                       after - before) x expert_bytes x its ms per byte
//   migration           one-off: expert_copies x expert_bytes x moved_tensors_per_expert moved
//                       (applied rebalance records' ms per byte, else the all-to-all fit's),
//                       amortised over window_steps
//   rebalance           the rebalancer's own time per step: its load all-reduces
//                       (rebalancer_collectives_per_step x the all-reduce's fixed ms) and its
//                       decisions' recorded time amortised over the window
// Fits (fit_comm_costs): each op's transfer time (duration less the wait for the last rank,
// collective_op_wait.h) against the bytes of the collective's largest copy (it ends when its
// largest transfer does), least squares (linear_fit.h). Without all-reduce ops in
// the trace (moe_train's Gloo all-reduces are not recorded) the all-reduce uses the all-to-all
// fit with twice the bytes (a ring all-reduce moves each byte out and back).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "moescope/analysis/linear_fit.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct PlacementPrediction;

struct CommCostFit {
  LinearFit all_to_all;  // transfer ms of one all-to-all op vs its bytes (migration ops left out)
  LinearFit all_reduce;  // transfer ms of one all-reduce op vs its bytes
  bool all_reduce_measured = false;     // false: all_reduce derived from all_to_all
  double all_to_all_bytes_per_row = 0;  // all-to-all bytes per received row (0: no rows)
  double all_to_all_mean_ms = 0;        // one all-to-all op's mean duration, its wait included
  LinearFit migration;                  // ms of one applied decision vs its bytes_moved
  bool migration_measured = false;      // false: migration derived from all_to_all
  size_t decisions = 0;                 // rebalance records
  double decision_ms_mean = 0;          // their mean recorded duration
};

CommCostFit fit_comm_costs(const TraceModel& model);

// What the placement change does besides moving rows (from the planner), and how it is run.
struct PlacementChangeCosts {
  std::vector<int> replicated_before, replicated_after;  // [layers] experts with > 1 replica
  size_t expert_copies = 0;  // slots that take in another expert's weights
  size_t layer_moves = 0;    // layer placements changed (each a migration); 0: every layer once
  double expert_bytes = 0;   // one expert's weights (= its gradient); 0: unknown
  double moved_tensors_per_expert = 4;  // weights, gradient, Adam's two moments
  // All-reduces a layer's first replica adds: 0 where the loop packs the replicas' gradients
  // into its gradient all-reduce (moe_train, moescope.runtime's ExpertBalancer per step), 1
  // where it calls MoELayer::sync_replica_gradients per layer.
  int sync_collectives_per_layer = 0;
  double window_steps = 50;  // steps the placement is kept (the rebalance interval)
  bool rebalancer = true;    // a runtime rebalancer applies it (its own time counts)
  // All-reduces of its own the rebalancer makes per step: 0 where its loads ride on one the
  // loop makes anyway (moe_train's step statistics), 1 standalone (ExpertRebalancer::after_step).
  int rebalancer_collectives_per_step = 0;
};

struct StepCostTerm {
  std::string name;  // "expert compute", "all-to-all", "replica grad sync", "migration", ...
  double ms = 0;     // change per step
  double stderr_ms = 0;
  std::string basis;  // what it was computed from
};

// The terms besides expert compute, for `rows_change` = sum over layers of the busiest rank's
// row change per step.
std::vector<StepCostTerm> placement_cost_terms(const CommCostFit& fit,
                                               const PlacementChangeCosts& costs,
                                               double rows_change);

// Does the change pay over the next window? gain = -(recurring terms) x window; cost = the
// migration's one-off time. Rebalance only when gain > cost (the net change is negative).
struct RebalanceAdvice {
  bool rebalance = false;
  double window_steps = 0;
  double gain_ms = 0;       // over the window
  double move_cost_ms = 0;  // one-off
  double net_ms_per_step = 0, net_low = 0, net_high = 0;
  bool beyond_uncertainty = false;  // the whole interval is on the advised side
  std::string reason;
};
// Over the prediction's window_steps.
RebalanceAdvice advise_rebalance(const PlacementPrediction& prediction);

}  // namespace moescope::analysis
