// The runtime rebalancer replayed on a recorded run (plan_replay.h).
#include "plan_replay.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "moescope/analysis/layer_forward_samples.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/step_cost_terms.h"
#include "moescope/balancer/running_line_fit.h"
#include "plan_step_loads.h"

namespace moescope::cli {
namespace {

balancer::LineEstimate line_estimate(const analysis::LinearFit& fit) {
  balancer::LineEstimate line;
  line.valid = fit.valid;
  line.has_slope = fit.valid;
  line.intercept = fit.intercept;
  line.slope = fit.slope;
  line.intercept_stderr = fit.intercept_stderr;
  line.slope_stderr = fit.slope_stderr;
  line.samples = double(fit.samples);
  return line;
}

// The rates the runtime would have measured over the whole run, from the trace: expert compute
// per forward row, the all-to-all, all-reduce and migration lines of `comm`; sets `bytes.row`.
balancer::RebalanceCostRates trace_cost_rates(const analysis::TraceModel& model, size_t skip_steps,
                                              const analysis::CommCostFit& comm,
                                              balancer::ExpertSlotBytes& bytes) {
  const analysis::ExpertCostModel expert = analysis::fit_expert_cost(model, skip_steps);
  if (!expert.valid) {
    throw std::invalid_argument(
        "--rebalance-every: no expert cost from the traces to judge the "
        "replayed plans with: " +
        expert.problem);
  }
  balancer::RebalanceCostRates rates;
  rates.compute.valid = rates.compute.has_slope = true;
  // The runtime's compute line is the forward's experts alone (rates_by_step refits it step by
  // step from the spans): the spans' slope where fitted, else the step's cost over the passes.
  const double forward_share = expert.from_expert_spans
                                   ? expert.forward_ms_per_row / expert.ms_per_row
                                   : 1.0 / rates.compute_passes_per_step;
  rates.compute.slope = expert.ms_per_row * forward_share;
  rates.compute.slope_stderr = expert.ms_per_row_stderr * forward_share;
  rates.compute.samples = double(expert.samples);
  rates.assumed_ms_per_row = expert.ms_per_row;
  rates.all_to_all = line_estimate(comm.all_to_all);
  rates.all_reduce = line_estimate(comm.all_reduce);
  if (comm.migration_measured) rates.migration = line_estimate(comm.migration);
  // The trace's all-to-all bytes per row cover every all-to-all of a step; the rates count
  // them per all-to-all.
  bytes.row = comm.all_to_all_bytes_per_row / rates.all_to_alls_per_step;
  return rates;
}

// A running line over the forwards' samples (sorted by step) of y against x, taking those up to
// each step in turn.
class StepwiseFit {
 public:
  using Point = std::pair<double, double>;  // x, y; y < 0: not measured
  StepwiseFit(const std::vector<analysis::LayerForwardSample>& samples,
              Point (*point)(const analysis::LayerForwardSample&))
      : samples_(samples), point_(point) {}
  bool empty() const { return samples_.empty(); }
  balancer::LineEstimate through(int64_t step) {
    for (; next_ < samples_.size() && samples_[next_].step <= step; ++next_) {
      const auto [x, y] = point_(samples_[next_]);
      if (y >= 0) fit_.add(x, y);
    }
    return fit_.estimate();
  }

 private:
  const std::vector<analysis::LayerForwardSample>& samples_;
  Point (*point_)(const analysis::LayerForwardSample&);
  size_t next_ = 0;
  balancer::RunningLineFit fit_;
};

// What the runtime had measured by the end of each step of `step_ids`, from the samples it
// times itself (runtime/layer_cost_samples.h), where the trace has them: each layer forward's
// expert compute against the rows its rank received (the moe.experts spans) and its dispatch
// all-to-all against the bytes received (the a2a.dispatch ops; `row_bytes` a row), over every
// rank. The whole run's other lines have their errors widened to the steps seen so far
// (x sqrt(steps / steps so far): the same noise over fewer samples). Early decisions are
// uncertain, and the cost rule waits for them.
std::vector<balancer::RebalanceCostRates> rates_by_step(const analysis::TraceModel& model,
                                                        const std::vector<int64_t>& step_ids,
                                                        const balancer::RebalanceCostRates& run,
                                                        double row_bytes) {
  const std::vector<analysis::LayerForwardSample> forwards = analysis::layer_forward_samples(model);
  StepwiseFit compute(forwards, [](const analysis::LayerForwardSample& forward) {
    return StepwiseFit::Point{forward.rows, forward.experts_ms};
  });
  // Against the rows received; the slope per row becomes per byte below.
  StepwiseFit dispatch(forwards, [](const analysis::LayerForwardSample& forward) {
    return StepwiseFit::Point{forward.rows, forward.dispatch_ms};
  });
  const bool dispatch_known = std::any_of(
      forwards.begin(), forwards.end(),
      [](const analysis::LayerForwardSample& forward) { return forward.dispatch_ms >= 0; });
  std::vector<balancer::RebalanceCostRates> rates;
  for (size_t s = 0; s < step_ids.size(); ++s) {
    balancer::RebalanceCostRates at = run;
    const double widen = std::sqrt(double(step_ids.size()) / double(s + 1));
    for (balancer::LineEstimate* line :
         {&at.compute, &at.all_to_all, &at.all_reduce, &at.migration}) {
      line->slope_stderr *= widen;
      line->intercept_stderr *= widen;
    }
    if (!compute.empty()) at.compute = compute.through(step_ids[s]);
    if (dispatch_known && row_bytes > 0) {
      at.all_to_all = dispatch.through(step_ids[s]);
      at.all_to_all.slope /= row_bytes;
      at.all_to_all.slope_stderr /= row_bytes;
    }
    rates.push_back(at);
  }
  return rates;
}

// Each step of `step_ids` in seconds, the mean over the ranks that have it (what the runtime
// weighs the imbalance rule's gain by: the group's mean step time); a step no rank has takes
// the mean of the others.
std::vector<double> recorded_step_seconds(const analysis::TimeBreakdown& breakdown,
                                          const std::vector<int64_t>& step_ids) {
  const analysis::StepSeries recorded =
      analysis::mean_over_ranks_by_step(breakdown, &analysis::StepBreakdown::step_ms);
  std::vector<double> seconds(step_ids.size(), -1.0);
  double sum = 0;
  size_t known = 0;
  for (size_t s = 0; s < step_ids.size(); ++s) {
    const auto found = std::lower_bound(recorded.steps.begin(), recorded.steps.end(), step_ids[s]);
    if (found == recorded.steps.end() || *found != step_ids[s]) continue;
    seconds[s] = recorded.values[static_cast<size_t>(found - recorded.steps.begin())] * 1e-3;
    sum += seconds[s], ++known;
  }
  for (double& one : seconds) {
    if (one < 0) one = known ? sum / double(known) : 0.0;
  }
  return seconds;
}

}  // namespace

balancer::RebalanceReplay replay_recorded_run(const analysis::TraceModel& model,
                                              const analysis::TimeBreakdown& breakdown,
                                              const PlanOptions& options) {
  const std::vector<int64_t> kept_steps = analysis::steps_after_warmup(model, options.skip_steps);
  const std::set<int64_t> kept(kept_steps.begin(), kept_steps.end());
  std::vector<balancer::ExpertLoads> steps;
  std::vector<int64_t> step_ids;
  size_t skipped = 0;
  for (RecordedStepLoads& step : recorded_step_loads(model)) {
    if (!kept.count(step.step)) ++skipped;  // the kept steps are the last ones
    steps.push_back(std::move(step.loads));
    step_ids.push_back(step.step);
  }
  if (steps.empty()) {
    throw std::invalid_argument(
        "--rebalance-every: no step of the traces holds every layer's "
        "expert loads");
  }
  balancer::RebalanceReplayOptions replay;
  replay.num_slots = options.num_slots;
  replay.num_gpus = options.num_gpus;
  replay.policy.interval_steps = options.rebalance_every;
  replay.policy.warmup_steps = std::min<int64_t>(options.rebalance_every, 10);  // as moe_train's
  replay.policy.imbalance_threshold = options.rebalance_threshold;
  replay.policy.incremental_max_over_mean = options.incremental_bound;
  replay.policy.replica_gradients_packed = options.replica_sync_collectives == 0;
  replay.policy.rule = options.rebalance_rule == "imbalance"
                           ? balancer::RebalanceRule::kImbalanceGain
                           : balancer::RebalanceRule::kPredictedNetGain;
  replay.policy.transfer_bytes_per_second = options.transfer_bandwidth;
  replay.step_seconds = recorded_step_seconds(breakdown, step_ids);
  replay.bytes.migrated = options.expert_bytes * options.moved_tensors;
  replay.bytes.gradient = options.expert_bytes;
  const analysis::CommCostFit comm = analysis::fit_comm_costs(model);
  const balancer::RebalanceCostRates run =
      trace_cost_rates(model, options.skip_steps, comm, replay.bytes);
  replay.rates = rates_by_step(model, step_ids, run, replay.bytes.row);
  // A move as the runtime will time it: one all-to-all per tensor it moves (each as long as the
  // trace's all-to-alls, their waits included) plus its bytes at the all-to-all's rate.
  if (comm.all_to_all.valid) {
    replay.move_time.valid = replay.move_time.has_slope = true;
    replay.move_time.intercept =
        options.moved_tensors * options.tensors_per_expert * comm.all_to_all_mean_ms;
    replay.move_time.slope = comm.all_to_all.slope;
  }
  return balancer::replay_rebalancer(steps, replay, skipped);
}

void count_replay_costs(const balancer::RebalanceReplay& replay,
                        analysis::PlacementChangeCosts& costs) {
  costs.expert_copies = 0;
  costs.layer_moves = 0;
  for (size_t layer = 0; layer < replay.layers.size(); ++layer) {
    const balancer::ReplayedLayer& replayed = replay.layers[layer];
    costs.replicated_after.at(layer) = int(std::lround(replayed.mean_replicated_experts));
    costs.expert_copies += replayed.expert_copies;
    costs.layer_moves += replayed.applied;
  }
  costs.window_steps = double(std::max<size_t>(1, replay.kept_steps));
}

std::string replay_note(const balancer::RebalanceReplay& replay, const PlanOptions& options) {
  size_t decisions = 0, applied = 0, copies = 0;
  std::string busiest;
  for (const balancer::ReplayedLayer& layer : replay.layers) {
    decisions += layer.decisions, applied += layer.applied, copies += layer.expert_copies;
    busiest += " " + std::to_string(int64_t(std::lround(layer.mean_busiest_rows)));
  }
  return "replayed the runtime rebalancer (" + options.rebalance_rule + " rule) every " +
         std::to_string(options.rebalance_every) + " steps on " +
         std::to_string(replay.kept_steps) + " recorded steps: " + std::to_string(applied) +
         " of " + std::to_string(decisions) + " layer decisions applied, " +
         std::to_string(copies) +
         " expert copies; the prediction is for that run (busiest GPU's rows per step by layer:" +
         busiest + ")";
}

}  // namespace moescope::cli
