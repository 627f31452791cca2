// The JSON files `plan` and `diff` read back (written by `moescope plan --json`), parsed with
// every value checked: a file that is not one of ours, or one edited by hand, gives an error
// naming the file and the field (std::runtime_error), never a crash or a silent wrap.
// A small library of its own so tests/fuzz can fuzz exactly what the commands run.
#pragma once

#include <string>

#include "moescope/analysis/placement_prediction.h"
#include "moescope/balancer/expert_loads.h"
#include "moescope/balancer/expert_placement.h"

namespace moescope::cli {

// The "prediction" object of a plan file (`diff --predicted PLAN.json`); `path` names it in
// errors.
analysis::PlacementPrediction prediction_from_plan_text(const std::string& text,
                                                        const std::string& path);
analysis::PlacementPrediction read_prediction(const std::string& path);

// The placement of a plan file (`plan --current PLAN.json`), checked against the loads' layers
// and experts and --gpus.
balancer::ExpertPlacement placement_from_plan_text(const std::string& text, const std::string& path,
                                                   const balancer::ExpertLoads& loads,
                                                   int num_gpus);
balancer::ExpertPlacement read_current_placement(const std::string& path,
                                                 const balancer::ExpertLoads& loads, int num_gpus);

}  // namespace moescope::cli
