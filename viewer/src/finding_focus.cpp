#include "moescope/viewer/finding_focus.h"

#include <algorithm>
#include <limits>

namespace moescope::viewer {

TimeFocus finding_time_focus(const analysis::TraceModel& model, const ViewerFinding& finding) {
  TimeFocus focus{static_cast<double>(model.begin), static_cast<double>(model.end), finding.rank};
  if (finding.time_end > finding.time_begin) {
    focus.begin_ns = static_cast<double>(finding.time_begin);
    focus.end_ns = static_cast<double>(finding.time_end);
    return focus;
  }
  if (finding.step_first < 0) return focus;
  int64_t last_step = finding.step_last >= 0 ? finding.step_last : finding.step_first;
  analysis::TimeNs first = std::numeric_limits<analysis::TimeNs>::max();
  analysis::TimeNs last = std::numeric_limits<analysis::TimeNs>::min();
  for (const auto& process : model.processes) {
    if (finding.rank >= 0 && process.rank != finding.rank) continue;
    for (const auto& step : process.steps) {
      if (step.step < finding.step_first || step.step > last_step) continue;
      first = std::min(first, step.start);
      last = std::max(last, step.end);
    }
  }
  if (first < last) {
    focus.begin_ns = static_cast<double>(first);
    focus.end_ns = static_cast<double>(last);
  }
  return focus;
}

}  // namespace moescope::viewer
