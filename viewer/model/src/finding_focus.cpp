#include "moescope/viewer/finding_focus.h"

#include <algorithm>
#include <limits>

namespace moescope::viewer {

TimeFocus finding_time_focus(const analysis::TraceModel& model, const analysis::Finding& finding) {
  const int32_t rank = analysis::finding_rank(model, finding);
  TimeFocus focus{static_cast<double>(model.begin), static_cast<double>(model.end), rank};
  if (finding.end > finding.start) {
    focus.begin_ns = static_cast<double>(finding.start);
    focus.end_ns = static_cast<double>(finding.end);
    return focus;
  }
  const int64_t first_step = finding.where.first_step;
  if (first_step < 0) return focus;
  int64_t last_step = finding.where.last_step >= 0 ? finding.where.last_step : first_step;
  analysis::TimeNs first = std::numeric_limits<analysis::TimeNs>::max();
  analysis::TimeNs last = std::numeric_limits<analysis::TimeNs>::min();
  for (const auto& process : model.processes) {
    if (rank >= 0 && process.rank != rank) continue;
    for (const auto& step : process.steps) {
      if (step.step < first_step || step.step > last_step) continue;
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
