// Pieces of the timeline drawn over or beside the spans: counter plots and the stacked memory
// track, and the wait-for-the-last-rank shade of collective ops with its tooltip line.
#pragma once

#include <cstdint>

#include <imgui.h>

#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/time_axis.h"
#include "moescope/viewer/timeline_index.h"

namespace moescope::viewer {

// One plot track between `top` and `bottom` (screen px): a counter as a step line scaled to its
// maximum; memory in use as its categories stacked, each in its colour, with a legend.
void draw_plot_run(ImDrawList* draw, const analysis::TraceModel& model, const TimelineIndex& index,
                   const TimelineFrame& frame, const PlotRun& run, float area_x, float top,
                   float bottom);

// Shades the part of collective op `event` of communicator `track` that waited for the last rank
// (trace.op_waits), over the op drawn in [x0, x1] x [y0, y1]; records it in the layout probe.
void draw_collective_wait(ImDrawList* draw, const LoadedTrace& trace, const TimelineTrack& track,
                          uint32_t event, const TimeAxis& axis, float area_x, float x0, float x1,
                          float y0, float y1);

// The tooltip's / details' line of a collective op: its wait and transfer, when matched.
void show_collective_wait(const LoadedTrace& trace, const EventRef& ref);

}  // namespace moescope::viewer
