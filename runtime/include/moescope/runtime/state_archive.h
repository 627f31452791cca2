// Runtime state in checkpoints, as torch::serialize archives (the format the rest of a LibTorch
// checkpoint uses): readers that name the missing entry, and an ExpertLoadForecaster's state
// (each layer's predictor and its open accuracy window). ExpertRebalancer and
// ExpertOptimizerOffload save and load their own state with these.
//
// Forecaster archive layout (one nested archive per layer):
//   num_layers                         int
//   layer<l>/predictor_name            string, LoadPredictor::name()
//   layer<l>/num_experts               int
//   layer<l>/num_observed_steps        int
//   layer<l>/values                    [V] double   (LoadPredictorState::values)
//   layer<l>/positions                 [P] int64    (LoadPredictorState::positions)
//   layer<l>/horizon_steps             int
//   layer<l>/steps_in_window           int
//   layer<l>/num_windows_scored        int
//   layer<l>/window_prediction         [E] double
//   layer<l>/window_actual_sum         [E] double
//   layer<l>/accuracy_sum              [5] double   (PredictionAccuracy fields in order)
//   layer<l>/accuracy_latest           [5] double, or [0] before the first scored window
//   layer<l>/recent_errors             [windows x experts] double, the last window errors
//                                      (absent in older checkpoints: none)
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <string>

#include "moescope/balancer/load_predictor.h"

namespace moescope::runtime {

void save_forecaster(const balancer::ExpertLoadForecaster& forecaster,
                     torch::serialize::OutputArchive& archive);

/// Restores what save_forecaster() wrote into a forecaster with the same layers, experts,
/// predictor and accuracy horizon. `what` names the archive in errors (e.g. "checkpoint
/// run.pt: expert_rebalancer/forecast"). Throws c10::Error naming a missing entry or the
/// mismatch.
void load_forecaster(balancer::ExpertLoadForecaster& forecaster,
                     torch::serialize::InputArchive& archive, const std::string& what);

/// Reads entry `key` of `archive`; throws c10::Error "<what>: no entry <key>" when it is missing.
c10::IValue read_archive_value(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& what);
at::Tensor read_archive_tensor(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& what);
torch::serialize::InputArchive read_archive_nested(torch::serialize::InputArchive& archive,
                                                   const std::string& key, const std::string& what);

}  // namespace moescope::runtime
