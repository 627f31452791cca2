// A recorded run's expert loads step by step, for what `moescope plan` computes per step rather
// than from the mean: the next window's scenarios (plan_next_window.h) and the plan's busiest
// GPU of each step (the step-time prediction, placement_prediction.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"
#include "moescope/balancer/expert_loads.h"
#include "moescope/balancer/expert_placement.h"

namespace moescope::cli {

struct RecordedStepLoads {
  int64_t step = 0;
  balancer::ExpertLoads loads;  // [layers x experts], layers in id order
};

/// The steps that hold every layer's loads, in step order (layers in id order, as
/// expert_loads_of_model orders them). Throws std::runtime_error when layers differ in their
/// expert counts.
std::vector<RecordedStepLoads> recorded_step_loads(const analysis::TraceModel& model);

/// Per layer of `plan` ([layers]): the mean over the recorded steps after `skip_steps` of the
/// max over GPUs of that step's tokens under `plan` (replicas share an expert's tokens evenly).
/// Empty when no such step holds every layer's loads or the layer counts differ.
std::vector<double> mean_busiest_gpu_rows(const analysis::TraceModel& model,
                                          const balancer::ExpertPlacement& plan, size_t skip_steps);

}  // namespace moescope::cli
