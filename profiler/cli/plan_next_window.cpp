// Scenarios of the next window from a recorded run (plan_next_window.h).
#include "plan_next_window.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "moescope/balancer/load_predictor.h"
#include "moescope/balancer/next_window_placement.h"
#include "plan_step_loads.h"

namespace moescope::cli {
using balancer::ExpertLoads;

NextWindowScenarios next_window_scenarios(const analysis::TraceModel& model, size_t window_steps) {
  if (window_steps == 0) throw std::runtime_error("--next-window needs --window of at least 1");
  std::vector<ExpertLoads> steps;
  for (RecordedStepLoads& step : recorded_step_loads(model)) steps.push_back(std::move(step.loads));
  if (steps.empty()) {
    throw std::runtime_error("--next-window: no step holds the expert loads of every layer");
  }
  const ExpertLoads& first = steps.front();
  // The forecaster scores windows of window_steps and keeps each layer's last errors (window
  // mean - the forecast made before it), as the runtime rebalancer's does.
  balancer::ExpertLoadForecaster forecaster(first.num_layers, first.num_experts, {},
                                            static_cast<int>(window_steps));
  for (const ExpertLoads& step : steps) {
    for (int layer = 0; layer < first.num_layers; ++layer)
      forecaster.observe(layer, step.layer(layer));
  }
  // The windows every layer has an error for (a window with no token leaves none): the last.
  size_t windows = balancer::kRecentWindowErrors;
  for (int layer = 0; layer < first.num_layers; ++layer) {
    windows = std::min(windows, forecaster.accuracy(layer).recent_errors().size());
  }
  std::vector<ExpertLoads> errors(windows, ExpertLoads{first.num_layers, first.num_experts, {}});
  for (int layer = 0; layer < first.num_layers; ++layer) {
    const auto& layer_errors = forecaster.accuracy(layer).recent_errors();
    for (size_t e = 0; e < windows; ++e) {
      const std::vector<double>& error = layer_errors[layer_errors.size() - windows + e];
      errors[e].values.insert(errors[e].values.end(), error.begin(), error.end());
    }
  }
  return {balancer::forecast_scenarios(forecaster.predict_all(), errors), steps.size()};
}

std::optional<NextWindowScenarios> next_window_inputs(bool requested,
                                                      const analysis::TraceModel* model,
                                                      bool has_current, double window_steps) {
  if (!requested) return std::nullopt;
  if (!model || has_current) {
    throw std::invalid_argument(
        "--next-window plans from TRACE files (their per-step loads), without --current");
  }
  return next_window_scenarios(*model, static_cast<size_t>(std::max(0.0, window_steps)));
}

std::string next_window_note(const NextWindowScenarios& inputs, double window_steps) {
  return "planned for the next " + std::to_string(static_cast<int64_t>(window_steps)) +
         " steps: expected balance over " + std::to_string(inputs.scenarios.size()) +
         " load scenarios (the forecast after " + std::to_string(inputs.steps) +
         " recorded steps and its errors on the last windows)";
}

}  // namespace moescope::cli
