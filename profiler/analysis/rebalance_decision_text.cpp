// How the report words a rebalancing decision (rebalance_decision_text.h).
#include "moescope/analysis/rebalance_decision_text.h"

#include <algorithm>
#include <cstdio>

#include "rebalance_decision_lines.h"

namespace moescope::analysis {

std::string describe_rebalance_decision(const RebalanceDecision& decision) {
  const double costs = double(decision.replica_sync_ms) +
                       double(decision.migration_ms) / std::max(1.0f, decision.window_steps);
  char text[512];
  std::snprintf(text, sizeof(text),
                "rebalance at step %lld layer %u: %s, predicted gain %.2f ms/step %s replica sync "
                "%.2f ms/step + migration %.2f ms / %.0f steps; net %.2f +- %.2f ms/step (%s)",
                static_cast<long long>(decision.step), decision.layer,
                decision.applied ? "applied" : "kept", double(decision.gain_ms),
                double(decision.gain_ms) > costs ? ">" : "<=", double(decision.replica_sync_ms),
                double(decision.migration_ms), double(decision.window_steps),
                double(decision.net_ms), 1.96 * double(decision.net_stderr_ms),
                rebalance_reason_text(decision.reason));
  return text;
}

}  // namespace moescope::analysis

namespace moescope::analysis {

void write_rebalance_decisions(TextWriter& w, const std::vector<RebalanceDecision>& decisions) {
  const char* bullet = w.markdown() ? "- " : "  ";
  for (size_t i = 0; i < decisions.size() && i < kMaxRebalanceLines; ++i) {
    w.line(bullet + describe_rebalance_decision(decisions[i]));
  }
  if (decisions.size() > kMaxRebalanceLines) {
    w.line(bullet + std::to_string(decisions.size() - kMaxRebalanceLines) +
           " more decision(s) (report --format json lists them all)");
  }
}

}  // namespace moescope::analysis
