// Planning for the next window, not the last one: a placement chosen by its expected balance
// over several load scenarios drawn from the forecast's recent error.
//
// Scenarios (forecast_scenarios): the forecast for the next window plus each recent error of
// the forecaster (the actual mean load of a past window minus the forecast made before it),
// clamped at 0 tokens; the forecast itself is the first scenario.
// Candidates (plan_for_next_window): EPLB's greedy plan of the forecast, `config`'s plan of the
// forecast, and `config`'s plan of every scenario; per layer the candidate with the lowest mean
// max/mean per-GPU load over the scenarios is kept (ties: the earlier candidate, so the greedy
// plan). The greedy plan is a candidate, so on the scenarios the choice is never worse than it.
#pragma once

#include <vector>

#include "moescope/balancer/expert_loads.h"
#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {

/// `forecast` [layers, experts] and `recent_errors` (each [layers, experts], actual - forecast)
/// -> 1 + recent_errors.size() scenarios. Throws std::invalid_argument on mismatched shapes.
std::vector<ExpertLoads> forecast_scenarios(const ExpertLoads& forecast,
                                            const std::vector<ExpertLoads>& recent_errors);

/// Mean over `scenarios` of max/mean per-GPU load of `layer` under `placement`.
double expected_max_over_mean(const ExpertPlacement& placement,
                              const std::vector<ExpertLoads>& scenarios, int layer);

/// The plan described above; `scenarios` from forecast_scenarios (the first is the forecast).
/// Throws std::invalid_argument when there is no scenario.
ExpertPlacement plan_for_next_window(const std::vector<ExpertLoads>& scenarios,
                                     const PlacementConfig& config);

/// The same choice for a runtime that moves experts from `current` (the runtime rebalancer):
/// the candidates are `current` itself and plan_expert_placement_incremental(scenario, config,
/// current) of every scenario (the forecast's first); per layer the one with the lowest mean
/// max/mean over the scenarios is kept among those no worse than `current` on the forecast
/// (ties: the earlier, so `current`, then the forecast's plan). With the forecast alone it is
/// the forecast's incremental plan, or `current` when that plan balances no better. Throws
/// std::invalid_argument when there is no scenario or `current` does not fit them.
ExpertPlacement plan_incremental_for_next_window(const std::vector<ExpertLoads>& scenarios,
                                                 const PlacementConfig& config,
                                                 const ExpertPlacement& current);

}  // namespace moescope::balancer
