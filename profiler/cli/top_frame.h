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
// A rank is behind when it is more than a step behind the newest step and its last step ended
// kTopBehindSeconds (and kTopLagSteps median steps) before the newest one; a job is stalled
// when no rank still writing has finished a step for `stall_after_s` (`--stall-after`, by
// default kTopStallSeconds) and kTopLagSteps steps. Each recorder flushes every 100 ms, so live
// files trail each other by a flush and a step at most; the margins cover slow steps and hosts'
// clocks a few seconds apart.
inline constexpr double kTopBehindSeconds = 10.0;
inline constexpr double kTopStallSeconds = 30.0;
inline constexpr double kTopLagSteps = 20.0;

// Per rank: steps finished, the last one's time, busy and exposed communication; the slowest
// rank of the latest step every rank finished and its excess over the median of the others;
// per MoE layer that step's max/mean, cv, dead experts and hot experts with their shares.
// A rank whose trace is still being written has its last (unfinished) step left out.
// Ranks more than a step behind, and a job whose still-writing ranks have finished no step for
// a while (judged at `now_unix_ns`, the wall clock), each get a line.
std::string render_top_frame(const analysis::LiveRunState& run, analysis::TimeNs now_unix_ns,
                             double stall_after_s = kTopStallSeconds);

}  // namespace moescope::cli
