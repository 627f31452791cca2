// A bottleneck finding as the viewer lists it, and where clicking it takes the timeline: the
// finding's own time window when it has one, else the span of its steps on its rank (or on
// every rank), so "finding -> timeline jump" is plain maths that tests check without a window.
#pragma once

#include <cstdint>
#include <string>

#include "moescope/profiler/trace_model.h"

namespace moescope::viewer {

struct ViewerFinding {
  std::string kind;      // "expert_imbalance", "straggler_rank", ...
  std::string severity;  // "high", "medium", "low"
  double est_ms_per_step = 0.0;
  std::string title;  // one line
  std::string evidence;
  std::string suggestion;
  int32_t rank = -1;
  int32_t layer = -1;
  int32_t expert = -1;
  int64_t step_first = -1, step_last = -1;
  analysis::TimeNs time_begin = 0, time_end = 0;  // 0/0 = derive from the steps
};

struct TimeFocus {
  double begin_ns = 0.0, end_ns = 0.0;
  int32_t rank = -1;  // scroll the timeline to this rank's first track
};

// The time window to show for `finding` (the whole trace when nothing narrower is known).
TimeFocus finding_time_focus(const analysis::TraceModel& model, const ViewerFinding& finding);

}  // namespace moescope::viewer
