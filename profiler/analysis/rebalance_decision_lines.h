// The report's lines for the rebalancing decisions that carry their numbers (text/markdown).
#pragma once

#include <vector>

#include "moescope/analysis/trace_model.h"
#include "text_writer.h"

namespace moescope::analysis {

/// Up to kMaxRebalanceLines decisions (describe_rebalance_decision), then how many more.
inline constexpr size_t kMaxRebalanceLines = 12;
void write_rebalance_decisions(TextWriter& w, const std::vector<RebalanceDecision>& decisions);

}  // namespace moescope::analysis
