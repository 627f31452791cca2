// One frame of `moescope top`: the state of a (possibly running) job from its traces.
#pragma once

#include <string>

#include "moescope/analysis/trace_model.h"

namespace moescope::cli {

// Per rank: steps finished, the last one's time, busy and exposed communication; the slowest
// rank of the latest step every rank finished and its excess over the median of the others;
// per MoE layer that step's max/mean, cv, dead experts and hot experts with their shares.
// A rank whose trace is still being written has its last (unfinished) step left out.
std::string render_top_frame(const analysis::TraceModel& model);

}  // namespace moescope::cli
