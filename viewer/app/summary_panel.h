// The first screen's summary, drawn above the timeline: the step-time breakdown as a stacked
// bar, the root-cause chain and the heatmap's hottest cell (numbers from run_summary.h). A click
// on a part selects its finding (report tab) and jumps the timeline there; the hottest cell opens
// the heatmap with the cell outlined.
#pragma once

#include "moescope/viewer/loaded_trace.h"
#include "viewer_state.h"

namespace moescope::viewer {

void draw_run_summary(const LoadedTrace& trace, ViewerState& state);

}  // namespace moescope::viewer
