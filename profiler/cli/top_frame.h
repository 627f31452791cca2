// One frame of `moescope top`: the state of a (possibly running) job from its growing traces,
// as analysis/live_rank_state.h keeps it between refreshes.
#pragma once

#include <string>

#include "moescope/analysis/live_rank_state.h"

namespace moescope::cli {

// Ranks listed one per line up to this many; beyond, the slowest and fastest few and the
// distribution over every rank (a 1,024-rank job stays one screen).
inline constexpr size_t kTopRankRows = 16;
// MoE layers listed up to this many; beyond, the most imbalanced ones and the distribution.
inline constexpr size_t kTopLayerRows = 12;

// Per rank: steps finished, the last one's time, busy and exposed communication; the slowest
// rank of the latest step every rank finished and its excess over the median of the others;
// per MoE layer that step's max/mean, cv, dead experts and hot experts with their shares.
// A rank whose trace is still being written has its last (unfinished) step left out.
std::string render_top_frame(const analysis::LiveRunState& run);

}  // namespace moescope::cli
