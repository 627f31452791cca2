// `moescope plan`'s prediction in text: the cost model, each rank's load, every step cost term
// with its error, the net change with its interval, and the advice (--advise).
#pragma once

#include <optional>
#include <ostream>

#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/step_cost_terms.h"

namespace moescope::cli {

void print_prediction(std::ostream& out, const analysis::PlacementPrediction& prediction,
                      bool expert_bytes_known);
void print_advice(std::ostream& out, const analysis::RebalanceAdvice& advice);

// The "advice" object of `plan --json` (text of a JSON object).
std::string advice_json(const analysis::RebalanceAdvice& advice);

}  // namespace moescope::cli
