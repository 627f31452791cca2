// Converts the analysis library's ranked findings into ViewerFinding rows.
#pragma once

#include <vector>

#include "moescope/profiler/trace_model.h"
#include "moescope/viewer/finding_focus.h"

namespace moescope::viewer {

std::vector<ViewerFinding> compute_viewer_findings(const analysis::TraceModel& model);

}  // namespace moescope::viewer
