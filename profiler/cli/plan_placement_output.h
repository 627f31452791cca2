// `moescope plan`'s placement output: the text table (per layer, per GPU with --slots) and the
// placement JSON (--json) that `plan --current` and `diff --predicted` read back.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/step_cost_terms.h"
#include "moescope/balancer/expert_placement.h"
#include "plan_options.h"

namespace moescope::cli {

/// The placement as JSON text: the header fields, then one line per layer (large plans stay
/// readable and diffable); `prediction` and `advice` when given. `balances` has one entry per
/// layer of `plan`.
std::string placement_json(const PlanOptions& options, const balancer::ExpertPlacement& plan,
                           const std::vector<LayerBalance>& balances,
                           const std::optional<analysis::PlacementPrediction>& prediction,
                           const std::optional<analysis::RebalanceAdvice>& advice);

/// The plan line, each layer's max/mean before -> after (with --current its copies), with
/// `with_slots` each GPU's experts and the replicated ones, then the all-layers line.
void print_placement(std::ostream& out, const PlanOptions& options,
                     const balancer::ExpertPlacement& plan,
                     const std::vector<LayerBalance>& balances, bool with_slots);

}  // namespace moescope::cli
