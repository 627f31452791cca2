// The runtime rebalancer's policy replayed on recorded loads (rebalance_replay.h).
#include "moescope/balancer/rebalance_replay.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "moescope/balancer/expert_migration.h"

namespace moescope::balancer {

RebalanceReplay replay_rebalancer(const std::vector<ExpertLoads>& steps,
                                  const RebalanceReplayOptions& options, size_t skip_steps) {
  if (steps.empty()) throw std::invalid_argument("replay_rebalancer: no recorded step");
  const int layers = steps.front().num_layers, experts = steps.front().num_experts;
  for (const ExpertLoads& step : steps) {
    if (step.num_layers != layers || step.num_experts != experts) {
      throw std::invalid_argument("replay_rebalancer: the steps' loads differ in shape (" +
                                  std::to_string(step.num_layers) + " x " +
                                  std::to_string(step.num_experts) + " after " +
                                  std::to_string(layers) + " x " + std::to_string(experts) + ")");
    }
  }
  if (options.rates.size() != 1 && options.rates.size() != steps.size()) {
    throw std::invalid_argument("replay_rebalancer: " + std::to_string(options.rates.size()) +
                                " cost rates for " + std::to_string(steps.size()) +
                                " steps (give 1, or 1 per step)");
  }
  const bool timed = options.step_seconds.size() == steps.size();
  if (!timed && options.policy.rule == RebalanceRule::kImbalanceGain) {
    throw std::invalid_argument("replay_rebalancer: the imbalance rule needs each step's time (" +
                                std::to_string(options.step_seconds.size()) + " for " +
                                std::to_string(steps.size()) + " steps)");
  }
  std::vector<ExpertPlacement> placements(
      size_t(layers), initial_slot_placement(experts, options.num_slots, options.num_gpus));
  ExpertLoadForecaster forecaster(layers, experts, options.policy.predictor,
                                  options.policy.accuracy_horizon_steps);
  RebalanceReplay replay;
  replay.layers.resize(size_t(layers));
  int64_t observed = 0, since_decision = 0;
  double seconds_since_decision = 0;
  RunningLineFit moves_timed;  // the runtime's own migration line (its moves, as it times them)
  for (size_t s = 0; s < steps.size(); ++s) {
    const bool kept = s >= skip_steps;
    replay.kept_steps += kept ? 1 : 0;
    for (int l = 0; l < layers; ++l) {
      ReplayedLayer& layer = replay.layers[size_t(l)];
      const ExpertPlacement& placement = placements[size_t(l)];
      if (kept) {
        const std::vector<double> gpu_rows =
            gpu_loads_of_placement(steps[s].layer(l), placement, 0);
        layer.mean_gpu_rows.resize(gpu_rows.size());
        for (size_t g = 0; g < gpu_rows.size(); ++g) layer.mean_gpu_rows[g] += gpu_rows[g];
        layer.mean_busiest_rows += *std::max_element(gpu_rows.begin(), gpu_rows.end());
        layer.mean_replicated_experts += replicated_experts(placement);
      }
      forecaster.observe(l, steps[s].layer(l));
    }
    ++observed, ++since_decision;
    seconds_since_decision += timed ? options.step_seconds[s] : 0.0;
    if (!options.policy.decides_after(observed, since_decision)) continue;
    const double mean_step_seconds = seconds_since_decision / double(since_decision);
    since_decision = 0, seconds_since_decision = 0;
    for (int l = 0; l < layers; ++l) {
      ReplayedLayer& layer = replay.layers[size_t(l)];
      ExpertPlacement& placement = placements[size_t(l)];
      RebalanceCostRates rates = options.rates.size() == 1 ? options.rates[0] : options.rates[s];
      if (moves_timed.samples() > 0) rates.migration = moves_timed.estimate();
      const LayerRebalanceDecision decision = decide_layer_rebalance(
          forecaster.predict(l), forecaster.accuracy(l).recent_errors(), placement, options.policy,
          options.bytes, rates, mean_step_seconds);
      if (kept) layer.decisions += 1;
      if (!decision.verdict.apply) continue;
      if (options.move_time.valid) {
        moves_timed.add(decision.bytes_to_move, options.move_time.at(decision.bytes_to_move));
      }
      if (kept) layer.applied += 1, layer.expert_copies += decision.moves;
      // As MoELayer::apply_placement: renumbered so that experts stay where they are.
      placement = plan_expert_migration(placement, decision.candidate).placement;
    }
  }
  for (int l = 0; l < layers; ++l) {
    ReplayedLayer& layer = replay.layers[size_t(l)];
    const double kept = double(std::max<size_t>(1, replay.kept_steps));
    layer.mean_busiest_rows /= kept;
    for (double& rows : layer.mean_gpu_rows) rows /= kept;
    layer.mean_replicated_experts /= kept;
    layer.final_placement = placements[size_t(l)];
  }
  return replay;
}

}  // namespace moescope::balancer
