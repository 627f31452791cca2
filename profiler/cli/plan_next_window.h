// `moescope plan --next-window`: the loads to plan for are the next window's, not the recorded
// mean. From the run's per-step expert loads (analysis::layer_step_loads) the balancer's EMA
// forecaster (the runtime rebalancer's) is fed every step in windows of `window_steps`; the
// forecast after the last step and the forecast's errors on the last
// balancer::kRecentWindowErrors windows (window mean - the forecast made before it) are the
// scenarios plan_for_next_window weighs (balancer/next_window_placement.h; measured in
// docs/performance.md).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"
#include "moescope/balancer/expert_loads.h"

namespace moescope::cli {

struct NextWindowScenarios {
  std::vector<balancer::ExpertLoads> scenarios;  // the forecast first, then forecast + errors
  size_t steps = 0;                              // recorded steps every layer has
};

/// Throws std::runtime_error when no step holds every layer's loads or window_steps is 0.
NextWindowScenarios next_window_scenarios(const analysis::TraceModel& model, size_t window_steps);

/// plan's inputs: nothing unless `requested`; throws std::invalid_argument without traces
/// (`model` null) or with a current placement (the next-window plan is a fresh one).
std::optional<NextWindowScenarios> next_window_inputs(bool requested,
                                                      const analysis::TraceModel* model,
                                                      bool has_current, double window_steps);
/// "planned for the next 50 steps: expected balance over 5 load scenarios (...)".
std::string next_window_note(const NextWindowScenarios& inputs, double window_steps);

}  // namespace moescope::cli
