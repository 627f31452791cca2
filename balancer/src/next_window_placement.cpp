// Planning over forecast scenarios (next_window_placement.h).
#include "moescope/balancer/next_window_placement.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moescope::balancer {

std::vector<ExpertLoads> forecast_scenarios(const ExpertLoads& forecast,
                                            const std::vector<ExpertLoads>& recent_errors) {
  std::vector<ExpertLoads> scenarios{forecast};
  for (const ExpertLoads& error : recent_errors) {
    if (error.num_layers != forecast.num_layers || error.num_experts != forecast.num_experts ||
        error.values.size() != forecast.values.size()) {
      throw std::invalid_argument(
          "forecast_scenarios: an error of " + std::to_string(error.num_layers) + " x " +
          std::to_string(error.num_experts) + " for a forecast of " +
          std::to_string(forecast.num_layers) + " x " + std::to_string(forecast.num_experts));
    }
    ExpertLoads scenario = forecast;
    for (size_t i = 0; i < scenario.values.size(); ++i) {
      scenario.values[i] = std::max(0.0, forecast.values[i] + error.values[i]);
    }
    scenarios.push_back(std::move(scenario));
  }
  return scenarios;
}

double expected_max_over_mean(const ExpertPlacement& placement,
                              const std::vector<ExpertLoads>& scenarios, int layer) {
  double sum = 0;
  for (const ExpertLoads& scenario : scenarios) {
    sum += summarize_gpu_loads(gpu_loads_of_placement(scenario.layer(layer), placement, layer))
               .max_over_mean();
  }
  return scenarios.empty() ? 1.0 : sum / double(scenarios.size());
}

namespace {

// Per layer, the candidate with the lowest mean max/mean over `scenarios` among those
// `eligible(candidate, layer)` accepts (the first is always one; ties: the earlier), put
// together into one placement.
template <typename Eligible>
ExpertPlacement best_per_layer(const std::vector<ExpertPlacement>& candidates,
                               const std::vector<ExpertLoads>& scenarios, Eligible eligible) {
  const ExpertPlacement& first = candidates.front();
  std::vector<int32_t> physical_to_logical;
  for (int layer = 0; layer < first.num_layers; ++layer) {
    size_t best = 0;
    double best_score = expected_max_over_mean(first, scenarios, layer);
    for (size_t c = 1; c < candidates.size(); ++c) {
      if (!eligible(candidates[c], layer)) continue;
      const double score = expected_max_over_mean(candidates[c], scenarios, layer);
      if (score < best_score) best = c, best_score = score;
    }
    const auto slots = candidates[best].phy2log(layer);
    physical_to_logical.insert(physical_to_logical.end(), slots.begin(), slots.end());
  }
  return placement_from_physical_to_logical(first.num_layers, first.num_logical_experts,
                                            first.num_gpus, physical_to_logical);
}

}  // namespace

ExpertPlacement plan_for_next_window(const std::vector<ExpertLoads>& scenarios,
                                     const PlacementConfig& config) {
  if (scenarios.empty()) {
    throw std::invalid_argument("plan_for_next_window: no load scenario to plan for");
  }
  PlacementConfig greedy = config;
  greedy.refine_packing = false;
  greedy.search = PlacementSearch::kNone;
  std::vector<ExpertPlacement> candidates{plan_expert_placement(scenarios.front(), greedy)};
  for (const ExpertLoads& scenario : scenarios) {
    candidates.push_back(plan_expert_placement(scenario, config));
  }
  return best_per_layer(candidates, scenarios, [](const ExpertPlacement&, int) { return true; });
}

ExpertPlacement plan_incremental_for_next_window(const std::vector<ExpertLoads>& scenarios,
                                                 const PlacementConfig& config,
                                                 const ExpertPlacement& current) {
  if (scenarios.empty()) {
    throw std::invalid_argument("plan_incremental_for_next_window: no load scenario to plan for");
  }
  if (current.num_layers != scenarios.front().num_layers ||
      current.num_logical_experts != scenarios.front().num_experts) {
    throw std::invalid_argument("plan_incremental_for_next_window: the current placement is of " +
                                std::to_string(current.num_layers) + " x " +
                                std::to_string(current.num_logical_experts) + ", the loads " +
                                std::to_string(scenarios.front().num_layers) + " x " +
                                std::to_string(scenarios.front().num_experts));
  }
  std::vector<ExpertPlacement> candidates{current};
  for (const ExpertLoads& scenario : scenarios) {
    candidates.push_back(plan_expert_placement_incremental(scenario, config, current));
  }
  // A candidate the forecast itself says is worse than `current` is not one.
  const std::vector<ExpertLoads> forecast{scenarios.front()};
  return best_per_layer(candidates, scenarios, [&](const ExpertPlacement& candidate, int layer) {
    return expected_max_over_mean(candidate, forecast, layer) <=
           expected_max_over_mean(current, forecast, layer);
  });
}

}  // namespace moescope::balancer
