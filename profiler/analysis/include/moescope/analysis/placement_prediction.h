// What a new expert placement would save, predicted from one trace before anyone runs it.
//
// Cost model (fit_expert_cost): ms_per_row, the cost of one routed token on one expert, forward
// and backward. Where the trace has the runtime's moe.experts spans (expert_compute_samples.h),
// per layer forward f (rank, step, layer) of the measured run:
//   experts_ms(f) = forward_fixed_ms + forward_ms_per_row * rows(f)
// and ms_per_row = forward_ms_per_row * kExpertComputePasses (the backward about twice the
// forward): the expert GEMMs timed alone, so the line is tight. Where the trace also has the
// layers' all-to-alls (more than one rank), ms_per_row is measured whole instead: the slope of
//   between_ms(f) = fixed + ms_per_row * rows(f)
// where between_ms is the rank's own work between the layer's all-to-alls, forward (dispatch to
// combine) plus backward (combine's backward to dispatch's): what each all-to-all waits for on
// the busiest rank. On moe_train its backward is about 3x the forward, not 2x. Otherwise (rank
// summaries, traces of other tools), per rank r and step s:
//   busy_ms(r, s) = fixed_ms + ms_per_row * rows(r, s)
// busy_ms = step - exposed communication - idle (time_breakdown.h: the work the rank did
// itself, forward and backward), rows = the rows the rank's experts computed (its RECEIVED
// expert-load samples summed over layers): everything else the rank did is noise around that
// line (R^2 0.02-0.9 on moe_train). Least squares after the warm-up steps; it needs rows that
// vary across ranks or steps; without RECEIVED samples there is no model (`valid` false,
// `problem` says why).
//
// Prediction (predict_placement), given the per-GPU loads [layer][gpu] of a plan (tokens per
// step, `moescope plan`'s gpu_loads_after) for a run with one GPU per rank:
//   expert_ms_after(g) = ms_per_row * sum over layers of load(layer, g)
//   busy_ms_after(g)   = busy_ms_before(g) + ms_per_row * (rows_after(g) - rows_before(g))
//   step change        = ms_per_row * sum over layers of (max_g load_after - max_r rows_before)
// Every rank waits for the busiest one at each layer's all-to-all, so a layer costs its busiest
// rank's expert time; rows_before(r, layer) is the measured mean per step. Given the plan's
// busiest rows per step (`busiest_rows_after`: per layer the mean over the recorded steps of
// the max over GPUs of that step's loads under the plan), the change compares it with the
// measured mean of the per-step max over ranks instead: the busiest rank of each step, not of
// the mean, which is what a step waits for when the loads vary from step to step (a balanced
// placement's busiest rank is above its mean by the loads' noise).
// With PlacementChangeCosts (step_cost_terms.h) the change also counts the all-to-all bytes,
// the replicas' gradient all-reduce, the migration and the rebalancer's own time, each a term
// fitted from the trace; step_ms_change is then their net sum.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/step_cost_terms.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct TimeBreakdown;

// Each function below takes busy and step time from `breakdown` when given (the run's
// compute_time_breakdown, or the one rank summaries hold: time_breakdown_of_facts), else
// computes it from the model's events.

struct ExpertCostModel {
  bool valid = false;
  std::string problem;  // why not valid
  double fixed_ms = 0;
  double ms_per_row = 0;
  double ms_per_row_stderr = 0;  // standard error of the slope
  double r_squared = 0;
  size_t samples = 0;              // (rank, step) pairs fitted, or layer forwards with the spans
  bool from_expert_spans = false;  // ms_per_row = forward_ms_per_row x kExpertComputePasses
  double forward_ms_per_row = 0;   // the spans' slope (from_expert_spans)
  // ms_per_row = the slope of each layer's work between its all-to-alls, forward + backward
  // (layer_forward_samples.h), against its rows: the backward measured, not assumed.
  bool between_all_to_alls = false;
};

// `skip_steps`: the first steps of the run (warm-up) left out.
ExpertCostModel fit_expert_cost(const TraceModel& model, size_t skip_steps = 1,
                                const TimeBreakdown* breakdown = nullptr);

// "moe.experts spans: 0.120 ms + 0.000980 ms x rows per layer forward, R^2 0.95 over 760
// forwards; x 3 passes = 0.00294 ms per row" (or the busy-time line's terms).
std::string describe_expert_cost(const ExpertCostModel& cost);

struct RankPrediction {
  int32_t rank = 0;
  std::vector<double> rows_before;  // [layers] measured mean rows per step
  std::vector<double> rows_after;   // [layers] the plan's load on this GPU
  double busy_ms_before = 0;        // measured mean per step
  double busy_ms_after = 0;         // predicted
  double expert_ms_before = 0;      // ms_per_row * rows (model)
  double expert_ms_after = 0;
  double total_rows_before() const;
  double total_rows_after() const;
};

struct PlacementPrediction {
  ExpertCostModel cost;
  std::vector<uint32_t> layers;  // trace layer ids, in the plan's layer order
  std::vector<RankPrediction> ranks;
  double step_ms_before = 0;  // measured mean per step (mean over ranks)
  double step_ms_change = 0;  // predicted: the sum of the terms
  // Every cost the change adds or saves per step: "expert compute" first, then (with
  // PlacementChangeCosts) all-to-all, replica grad sync, migration, rebalance.
  std::vector<StepCostTerm> terms;
  double step_ms_change_stderr = 0;  // sqrt of the terms' squared errors summed
  double window_steps = 0;           // the migration is amortised over it (0: no costs given)
  double step_ms_after() const { return step_ms_before + step_ms_change; }
  // The 95% interval of the change.
  double change_low() const { return step_ms_change - 1.959964 * step_ms_change_stderr; }
  double change_high() const { return step_ms_change + 1.959964 * step_ms_change_stderr; }
};

// `gpu_loads_after[layer][gpu]` in the plan's layer order (the trace's layer ids ascending).
// Throws std::invalid_argument when the plan's GPUs are not the trace's ranks, its layers are
// not the trace's, or the cost model is not valid. `costs`: count the terms besides expert
// compute (step_cost_terms.h); null: expert compute only.
PlacementPrediction predict_placement(const TraceModel& model,
                                      const std::vector<std::vector<double>>& gpu_loads_after,
                                      size_t skip_steps = 1,
                                      const TimeBreakdown* breakdown = nullptr,
                                      const PlacementChangeCosts* costs = nullptr,
                                      const std::vector<double>* busiest_rows_after = nullptr);

// Per layer of `layers` ([layers]): the mean over the steps after `skip_steps` of the max over
// ranks of the rows each rank received that step.
std::vector<double> mean_busiest_rows_per_step(const TraceModel& model,
                                               const std::vector<uint32_t>& layers,
                                               size_t skip_steps = 1);

// JSON object text (the "prediction" of `moescope plan --json`) and back. The parser throws
// std::invalid_argument naming what is missing.
std::string prediction_to_json(const PlacementPrediction& prediction);
PlacementPrediction prediction_from_json(const std::string& json_object_text);

// Measured in a run (for `moescope diff --predicted`): per rank the mean rows per step of each
// of `layers` (RECEIVED samples) and the mean busy time per step, after `skip_steps`.
struct RankMeasurement {
  int32_t rank = 0;
  std::vector<double> rows;  // [layers]
  double busy_ms = 0;
};
std::vector<RankMeasurement> measure_rank_load(const TraceModel& model,
                                               const std::vector<uint32_t>& layers,
                                               size_t skip_steps = 1,
                                               const TimeBreakdown* breakdown = nullptr);

// The steps of a run left after its first `skip_steps` (known_steps order).
std::vector<int64_t> steps_after_warmup(const TraceModel& model, size_t skip_steps);

}  // namespace moescope::analysis
