// A recorded run's expert loads step by step (plan_step_loads.h).
#include "plan_step_loads.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/placement_prediction.h"

namespace moescope::cli {

std::vector<RecordedStepLoads> recorded_step_loads(const analysis::TraceModel& model) {
  std::map<int64_t, std::map<uint32_t, const std::vector<double>*>> by_step;
  std::map<uint32_t, size_t> experts_of_layer;
  const std::vector<analysis::LayerStepLoad> loads = analysis::layer_step_loads(model);
  for (const analysis::LayerStepLoad& load : loads) {
    by_step[load.step][load.layer] = &load.tokens;
    experts_of_layer[load.layer] = load.tokens.size();
  }
  std::vector<RecordedStepLoads> steps;
  for (const auto& [step, per_layer] : by_step) {
    if (per_layer.size() != experts_of_layer.size()) continue;
    RecordedStepLoads& recorded = steps.emplace_back();
    recorded.step = step;
    balancer::ExpertLoads& step_loads = recorded.loads;
    step_loads.num_layers = static_cast<int>(per_layer.size());
    step_loads.num_experts = static_cast<int>(per_layer.begin()->second->size());
    for (const auto& [layer, tokens] : per_layer) {
      if (static_cast<int>(tokens->size()) != step_loads.num_experts) {
        throw std::runtime_error("layer " + std::to_string(layer) + " has " +
                                 std::to_string(tokens->size()) + " experts, the first layer " +
                                 std::to_string(step_loads.num_experts));
      }
      step_loads.values.insert(step_loads.values.end(), tokens->begin(), tokens->end());
    }
  }
  return steps;
}

std::vector<double> mean_busiest_gpu_rows(const analysis::TraceModel& model,
                                          const balancer::ExpertPlacement& plan,
                                          size_t skip_steps) {
  const std::vector<int64_t> kept_steps = analysis::steps_after_warmup(model, skip_steps);
  const std::set<int64_t> kept(kept_steps.begin(), kept_steps.end());
  std::vector<double> sum(static_cast<size_t>(plan.num_layers), 0.0);
  size_t steps = 0;
  for (const RecordedStepLoads& step : recorded_step_loads(model)) {
    if (!kept.count(step.step)) continue;
    if (step.loads.num_layers != plan.num_layers ||
        step.loads.num_experts != plan.num_logical_experts) {
      return {};
    }
    for (int layer = 0; layer < plan.num_layers; ++layer) {
      const std::vector<double> gpu_loads =
          balancer::gpu_loads_of_placement(step.loads.layer(layer), plan, layer);
      sum[static_cast<size_t>(layer)] += *std::max_element(gpu_loads.begin(), gpu_loads.end());
    }
    ++steps;
  }
  if (steps == 0) return {};
  for (double& rows : sum) rows /= static_cast<double>(steps);
  return sum;
}

}  // namespace moescope::cli
