#include "moescope/viewer/waits_at_end.h"

namespace moescope::viewer {

std::vector<WaitAtEnd> waits_at_end(const analysis::TraceModel& model) {
  std::vector<WaitAtEnd> waits;
  for (uint32_t p = 0; p < model.processes.size(); ++p) {
    const analysis::ProcessTrack& process = model.processes[p];
    if (process.collectives_open.empty()) continue;  // no rank waited a second anywhere
    const analysis::TimeNs until = analysis::recording_end(process);
    for (const analysis::CollectiveState& state : analysis::collectives_at_end(process, until)) {
      if (!state.has_open) continue;
      WaitAtEnd wait{p, -1, state, until};
      for (size_t c = 0; c < process.communicators.size(); ++c) {
        if (process.communicators[c].comm_id == state.comm_id) wait.communicator = int32_t(c);
      }
      waits.push_back(wait);
    }
  }
  return waits;
}

}  // namespace moescope::viewer
