#include "timeline_plots.h"

#include <algorithm>
#include <cstdio>

#include "panel_drawing.h"

namespace moescope::viewer {

void draw_plot_run(ImDrawList* draw, const analysis::TraceModel& model, const TimelineIndex& index,
                   const TimelineFrame& frame, const PlotRun& run, float area_x, float top,
                   float bottom) {
  const double scale = run.max_value > 0 ? (bottom - top) / run.max_value : 0.0;
  const TimelineTrack& track = index.tracks[run.track];
  const bool stacked = track.kind == TimelineTrackKind::kMemory;
  for (uint32_t i = run.first_point; i + 1 < run.first_point + run.num_points; ++i) {
    const PlotPoint& a = frame.points[i];
    const PlotPoint& b = frame.points[i + 1];
    if (stacked) {
      const auto tops = memory_stack_tops(model.processes[track.process].memory_usage, a.sample);
      double below = 0.0;
      for (size_t c = 0; c < tops.size(); ++c) {
        if (tops[c] > below) {
          draw->AddRectFilled(
              ImVec2(area_x + a.x, std::max(top, bottom - static_cast<float>(tops[c] * scale))),
              ImVec2(area_x + b.x, std::max(top, bottom - static_cast<float>(below * scale))),
              kMemoryCategoryColours[c]);
        }
        below = tops[c];
      }
    }
    const float ya = bottom - static_cast<float>(a.value * scale);
    const float yb = bottom - static_cast<float>(b.value * scale);
    if (!stacked) {
      draw->AddRectFilled(ImVec2(area_x + a.x, ya), ImVec2(area_x + b.x, bottom),
                          IM_COL32(80, 140, 200, 90));
    }
    draw->AddLine(ImVec2(area_x + a.x, ya), ImVec2(area_x + b.x, ya), IM_COL32(120, 180, 240, 255));
    draw->AddLine(ImVec2(area_x + b.x, ya), ImVec2(area_x + b.x, yb), IM_COL32(120, 180, 240, 255));
  }
  char label[48];
  if (stacked) {
    std::snprintf(label, sizeof(label), "max %.1f MiB", run.max_value / (1024.0 * 1024.0));
    // The categories' colours, after the maximum.
    float legend_x = area_x + 110.0f;
    for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
      const char* name = analysis::memory_category_name(c);
      draw->AddText(ImVec2(legend_x, top), kMemoryCategoryColours[c], name);
      legend_x += ImGui::CalcTextSize(name).x + 10.0f;
    }
  } else {
    std::snprintf(label, sizeof(label), "max %.4g", run.max_value);
  }
  draw->AddText(ImVec2(area_x + 4, top), IM_COL32(200, 200, 200, 255), label);
}

void draw_collective_wait(ImDrawList* draw, const LoadedTrace& trace, const TimelineTrack& track,
                          uint32_t event, const TimeAxis& axis, float area_x, float x0, float x1,
                          float y0, float y1) {
  const analysis::TimeNs wait = trace.op_waits.wait(track.process, track.track, event);
  if (wait <= 0) return;
  const analysis::ProcessTrack& process = trace.model.processes[track.process];
  const auto& op = process.communicators[track.track].ops[event];
  const float wait_end = std::clamp(
      area_x + static_cast<float>(axis.time_to_x(static_cast<double>(op.start + wait))), x0, x1);
  draw->AddRectFilled(ImVec2(x0, y0), ImVec2(wait_end, y1), kCollectiveWaitColour);
  layout_probe().wait_shades.push_back(
      {static_cast<float>(process.rank), x0, wait_end, x1, 0.5f * (y0 + y1)});
}

void show_collective_wait(const LoadedTrace& trace, const EventRef& ref) {
  const TimelineTrack& track = trace.timeline.tracks[static_cast<size_t>(ref.track)];
  if (track.kind != TimelineTrackKind::kCommunicator) return;
  const uint32_t event =
      track.lanes[static_cast<size_t>(ref.lane)].event[static_cast<size_t>(ref.slot)];
  const analysis::TimeNs wait = trace.op_waits.wait(track.process, track.track, event);
  if (wait < 0) return;
  const auto& op = trace.model.processes[track.process].communicators[track.track].ops[event];
  char waited[32], transfer[32];
  format_duration(static_cast<double>(wait), waited, sizeof(waited));
  format_duration(static_cast<double>(op.duration() - wait), transfer, sizeof(transfer));
  ImGui::Text("waited %s for the last rank (dark part), transfer %s", waited, transfer);
}

}  // namespace moescope::viewer
