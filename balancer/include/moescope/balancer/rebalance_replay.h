// What the runtime's rebalancer would do on a run recorded without it: the recorded tokens per
// expert of every step are fed, step by step, to the forecaster the runtime uses
// (ExpertLoadForecaster), and every policy interval after its warm-up each layer's decision
// is taken by decide_layer_rebalance, as ExpertRebalancer::after_step takes it. An applied plan
// holds from the next step. The placement in force at each step gives that step's busiest GPU.
//
// Why: a plan made from the whole run's mean loads, with hindsight, promises more than a
// rebalancer that plans every window from a forecast can deliver (`moescope plan`'s step-time
// prediction of a rebalanced run; docs/balancer.md, "Does it pay?").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moescope/balancer/expert_loads.h"
#include "moescope/balancer/layer_rebalance.h"
#include "moescope/balancer/load_predictor.h"

namespace moescope::balancer {

struct RebalanceReplayOptions {
  int num_slots = 0;  // expert slots per layer over all GPUs
  int num_gpus = 0;
  RebalancePolicy policy;  // the runtime's (RebalancerOptions extends it)
  ExpertSlotBytes bytes;
  // What judges each plan: [1] the same at every decision, or [steps] what the runtime had
  // measured by the end of each step (its fits start empty and tighten as it runs).
  std::vector<RebalanceCostRates> rates;
  // How long one applied layer move will take (ms vs the bytes it moves), as the runtime times
  // it. The runtime measures its own moves: after the replay's first, every later decision
  // weighs a move by these times (its migration line), not by the rates' (not valid: the rates'
  // migration line throughout).
  LineEstimate move_time;
  // Each step's time in seconds [steps] (the ranks' mean), which the imbalance rule weighs its
  // gain by; may be empty under the cost rule.
  std::vector<double> step_seconds;
};

struct ReplayedLayer {
  double mean_busiest_rows = 0;        // kept steps: max over GPUs of the step's tokens
  std::vector<double> mean_gpu_rows;   // [num_gpus] kept steps: each GPU's tokens
  double mean_replicated_experts = 0;  // kept steps: experts with more than one slot
  size_t decisions = 0, applied = 0;   // decisions taken after a kept step
  size_t expert_copies = 0;            // copies the applied ones made
  ExpertPlacement final_placement;
};

struct RebalanceReplay {
  std::vector<ReplayedLayer> layers;  // [num_layers]
  size_t kept_steps = 0;              // steps after `skip_steps`
};

/// `steps`: each recorded step's loads [num_layers, num_experts] in step order; the first
/// `skip_steps` are fed to the forecaster but not averaged. Throws std::invalid_argument when
/// the steps differ in shape, there are none, the rates are neither 1 nor one per step, the
/// imbalance rule has not one step time per step, or the slots and GPUs do not fit the experts.
RebalanceReplay replay_rebalancer(const std::vector<ExpertLoads>& steps,
                                  const RebalanceReplayOptions& options, size_t skip_steps);

}  // namespace moescope::balancer
