// The collectives a trace ends inside: where a hung job's ranks were waiting when their
// recording stopped. The timeline draws each on its communicator's track, from the rank's entry
// to the recording's end, labelled with what it waits in and for how long.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/collective_mismatch.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::viewer {

struct WaitAtEnd {
  uint32_t process = 0;                  // index in TraceModel::processes
  int32_t communicator = -1;             // index in its communicators; -1: no op of it was recorded
  analysis::CollectiveState collective;  // has_open: open_entered, open_for_s, ...
  analysis::TimeNs until = 0;            // the recording's end (analysis::recording_end)
};

// Per process, each communicator its trace ends inside a collective of (analysis's
// collectives_at_end), in process order.
std::vector<WaitAtEnd> waits_at_end(const analysis::TraceModel& model);

}  // namespace moescope::viewer
