// Puts every process of a model on one clock. Processes on one host share CLOCK_MONOTONIC and
// need nothing. Across hosts, each host gets one offset against the first process's host,
// from (in order of preference) the runtime's clock-sync points (moescope_clock_sync, passed by
// all ranks together after a barrier), the ends of collectives every rank completes together
// (the n-th collective of each communicator), or the wall-clock start time in the metadata.
#pragma once

#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct ClockAlignment {
  ClockAlignmentMethod method = ClockAlignmentMethod::kSingleHost;
  std::vector<TimeNs> offsets;   // per process: add to its times
  std::vector<HostClock> hosts;  // each host but the first, with its error bound
};

// Offsets only; the model is not changed.
ClockAlignment compute_clock_alignment(const TraceModel& model);
// Computes and applies the offsets (every time of every shifted process moves), records the
// method in model.clock_alignment and each host's offset and error bound in model.host_clocks,
// and updates model.begin/end.
void align_clocks(TraceModel& model);

}  // namespace moescope::analysis
