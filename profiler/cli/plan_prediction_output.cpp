// `moescope plan`'s prediction and advice in text and JSON (plan_prediction_output.h).
#include "plan_prediction_output.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "moescope/analysis/json_fields.h"

namespace moescope::analysis {

MOESCOPE_JSON_FIELDS(RebalanceAdvice, rebalance, window_steps, gain_ms, move_cost_ms,
                     net_ms_per_step, net_low, net_high, beyond_uncertainty, reason)

}  // namespace moescope::analysis

namespace moescope::cli {
namespace {

std::string number(double value, const char* format) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

}  // namespace

void print_prediction(std::ostream& out, const analysis::PlacementPrediction& prediction,
                      bool expert_bytes_known) {
  const analysis::ExpertCostModel& cost = prediction.cost;
  out << "prediction (cost model from the trace: " << analysis::describe_expert_cost(cost)
      << "):\n";
  for (const analysis::RankPrediction& rank : prediction.ranks) {
    out << "  rank " << rank.rank << ": rows/step " << number(rank.total_rows_before(), "%.1f")
        << " -> " << number(rank.total_rows_after(), "%.1f") << ", expert compute "
        << number(rank.expert_ms_before, "%.2f") << " -> " << number(rank.expert_ms_after, "%.2f")
        << " ms, busy " << number(rank.busy_ms_before, "%.2f") << " -> "
        << number(rank.busy_ms_after, "%.2f") << " ms per step\n";
  }
  out << "  step time change per step, by cost (ms, +- standard error):\n";
  for (const analysis::StepCostTerm& term : prediction.terms) {
    out << "    " << term.name
        << std::string(term.name.size() < 18 ? 18 - term.name.size() : 1, ' ')
        << number(term.ms, "%+8.3f") << " +- " << number(term.stderr_ms, "%.3f") << "  ("
        << term.basis << ")\n";
  }
  if (prediction.terms.size() > 1 && !expert_bytes_known) {
    out << "    (no --expert-bytes: the replicas' gradient and migration bytes are not counted, "
           "only their collectives)\n";
  }
  const double before = prediction.step_ms_before;
  out << "  step time " << number(before, "%.2f") << " -> "
      << number(prediction.step_ms_after(), "%.2f") << " ms per step ("
      << number(prediction.step_ms_change, "%+.2f") << " ms ["
      << number(prediction.change_low(), "%+.2f") << ", "
      << number(prediction.change_high(), "%+.2f") << "] at 95%, "
      << number(before > 0 ? 100.0 * prediction.step_ms_change / before : 0.0, "%+.1f") << "%)\n";
}

void print_advice(std::ostream& out, const analysis::RebalanceAdvice& advice) {
  out << "advice: " << advice.reason << "; net " << number(advice.net_ms_per_step, "%+.2f")
      << " ms per step [" << number(advice.net_low, "%+.2f") << ", "
      << number(advice.net_high, "%+.2f") << "]\n";
}

std::string advice_json(const analysis::RebalanceAdvice& advice) {
  return nlohmann::ordered_json(advice).dump();
}

}  // namespace moescope::cli
