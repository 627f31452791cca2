// Where clicking a finding of the report takes the timeline: the finding's own time window
// when it has one, else the span of its steps on its rank (or on every rank), so "finding ->
// timeline jump" is plain maths that tests check without a window. The findings themselves
// are the analysis library's (analysis::Finding, the same rows `moescope report` prints).
#pragma once

#include <cstdint>

#include "moescope/analysis/findings.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::viewer {

struct TimeFocus {
  double begin_ns = 0.0, end_ns = 0.0;
  int32_t rank = -1;  // scroll the timeline to this rank's first track
};

// The time window to show for `finding` (the whole trace when nothing narrower is known).
TimeFocus finding_time_focus(const analysis::TraceModel& model, const analysis::Finding& finding);

}  // namespace moescope::viewer
