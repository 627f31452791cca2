#include "timeline_panel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <GLFW/glfw3.h>
#include "moescope/analysis/comm_analysis.h"
#include "moescope/viewer/event_description.h"
#include "panel_drawing.h"
#include "timeline_plots.h"

namespace moescope::viewer {

using analysis::ProcessTrack;
using analysis::TraceModel;

namespace {

ImU32 colour_of_name(analysis::StringId name) {
  // Stable, well spread hues per name (golden-ratio steps), muted so text stays readable.
  float hue = std::fmod(static_cast<float>(name) * 0.618034f, 1.0f);
  return static_cast<ImU32>(ImColor::HSV(hue, 0.45f, 0.78f));
}

ImU32 colour_of_event(const TraceModel& model, const TimelineTrack& track, uint32_t event,
                      analysis::StringId name) {
  const ProcessTrack& process = model.processes[track.process];
  if (track.kind == TimelineTrackKind::kGpuStream) {
    const auto& op = process.gpu_streams[track.track].ops[event];
    if (op.kind == analysis::GpuOpKind::kMemcpy) return IM_COL32(86, 170, 98, 255);
    if (op.kind == analysis::GpuOpKind::kMemset) return IM_COL32(120, 190, 120, 255);
    if (op.kind == analysis::GpuOpKind::kSync) return IM_COL32(200, 70, 70, 255);
  }
  if (track.kind == TimelineTrackKind::kCommunicator) return IM_COL32(224, 140, 50, 255);
  return colour_of_name(name);
}

// Lines describing an event (event_description.h): used by the tooltip and the details pane.
void show_event(const TraceModel& model, const TimelineIndex& index, const EventRef& ref,
                bool long_form) {
  for (const std::string& line : describe_event(model, index, ref, long_form)) {
    ImGui::TextUnformatted(line.c_str());
  }
}

}  // namespace

void TimelinePanel::reset(const LoadedTrace& trace) {
  axis_ = TimeAxis(
      static_cast<double>(trace.timeline.begin_ns),
      static_cast<double>(std::max(trace.timeline.end_ns, trace.timeline.begin_ns + 1)), 1000.0);
  // Open on the steps, not on the imports before them (zooming out shows the rest); for a hung
  // job, on toward where its ranks wait, at most as far again as the steps span (so that the
  // steps stay readable beside an hour-long wait).
  const TimelineIndex& index = trace.timeline;
  if (index.steps_end_ns > index.steps_begin_ns) {
    const int64_t span = index.steps_end_ns - index.steps_begin_ns;
    const int64_t end = index.waits_end_ns > index.steps_end_ns
                            ? std::min(index.waits_end_ns, index.steps_end_ns + span)
                            : index.steps_end_ns;
    axis_.show_range(static_cast<double>(index.steps_begin_ns), static_cast<double>(end), 0.02);
  }
  matches_.clear();
  match_index_ = -1;
  searched_.clear();
  flows_for_ = {};
  selected_arrows_.clear();
}

void TimelinePanel::extend_to(const LoadedTrace& trace) {
  const double start = axis_.start_ns(), end = axis_.end_ns();
  axis_.set_bounds(
      static_cast<double>(trace.timeline.begin_ns),
      static_cast<double>(std::max(trace.timeline.end_ns, trace.timeline.begin_ns + 1)));
  axis_.show_range(start, end, 0.0);
  matches_.clear();
  match_index_ = -1;
  searched_.clear();
  flows_for_ = {};
  selected_arrows_.clear();
}

void TimelinePanel::select_and_show(const LoadedTrace& trace, ViewerState& state,
                                    const EventRef& ref) {
  state.selected = ref;
  EventSummary summary = summarize_event(trace.model, trace.timeline, ref);
  double duration = static_cast<double>(summary.end_ns - summary.start_ns);
  bool visible = summary.start_ns >= axis_.start_ns() && summary.end_ns <= axis_.end_ns();
  if (!visible || duration < axis_.duration_ns() * 0.002) {
    // Keep the current zoom when the event fits comfortably, else zoom to it.
    double length = std::max(axis_.duration_ns(), duration * 1.5);
    if (duration * 50 < length) length = std::max(duration * 20.0, 1000.0);
    double centre = 0.5 * static_cast<double>(summary.start_ns + summary.end_ns);
    axis_.show_range(centre - 0.5 * length, centre + 0.5 * length, 0.0);
  }
  if (ref.track >= 0 && static_cast<size_t>(ref.track) < rows_.size()) {
    // Scroll so the rank's first track (its launching thread) shows above the selection.
    size_t first = static_cast<size_t>(ref.track);
    uint32_t process = trace.timeline.tracks[first].process;
    while (first > 0 && trace.timeline.tracks[first - 1].process == process) --first;
    pending_scroll_y_ = rows_[first].top;
  }
}

void TimelinePanel::handle_keys(float area_x, float width) {
  ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;
  float dt = std::max(io.DeltaTime, 1.0f / 240.0f);
  ImVec2 mouse = io.MousePos;
  double anchor = mouse.x > area_x && mouse.x < area_x + width ? mouse.x - area_x : width * 0.5;
  if (ImGui::IsKeyDown(GLFW_KEY_W)) axis_.zoom_around(anchor, 1.0 + 3.0 * dt);
  if (ImGui::IsKeyDown(GLFW_KEY_S)) axis_.zoom_around(anchor, 1.0 / (1.0 + 3.0 * dt));
  if (ImGui::IsKeyDown(GLFW_KEY_A)) axis_.pan_pixels(width * 1.2 * dt);
  if (ImGui::IsKeyDown(GLFW_KEY_D)) axis_.pan_pixels(-width * 1.2 * dt);
}

void TimelinePanel::update_selected_flows(const LoadedTrace& trace, const ViewerState& state) {
  if (flows_for_ == state.selected) return;
  flows_for_ = state.selected;
  selected_arrows_ = arrows_of_event(trace.model, trace.timeline, state.selected, 500);
}

void TimelinePanel::draw_wait_at_end(ImDrawList* draw, const LoadedTrace& trace,
                                     const WaitAtEnd& wait, float area_x, float content_top) {
  // On the communicator's track (the process's first track when no op of it was recorded).
  const TimelineIndex& index = trace.timeline;
  int row = -1;
  for (size_t t = 0; t < index.tracks.size() && row < 0; ++t) {
    const TimelineTrack& track = index.tracks[t];
    if (track.process != wait.process) continue;
    if (wait.communicator < 0 || (track.kind == TimelineTrackKind::kCommunicator &&
                                  track.track == uint32_t(wait.communicator))) {
      row = int(t);
    }
  }
  if (row < 0) return;
  const TrackRows& rows = rows_[size_t(row)];
  const bool collapsed = index.tracks[size_t(row)].collapsed;
  const float y0 = content_top + (collapsed ? rows.top : rows.content_top) + 2.0f;
  const float y1 = y0 + (collapsed ? metrics_.header_height : metrics_.lane_height) - 4.0f;
  const auto x_of = [&](analysis::TimeNs time) {
    return area_x + static_cast<float>(axis_.time_to_x(static_cast<double>(time)));
  };
  const float x0 = x_of(wait.collective.open_entered), x1 = x_of(wait.until);
  const analysis::ProcessTrack& process = trace.model.processes[wait.process];
  layout_probe().waits_at_end.push_back(
      {static_cast<float>(process.rank), x0, x1, 0.5f * (y0 + y1)});
  draw->AddRectFilled(ImVec2(x0, y0), ImVec2(std::max(x1, x0 + 2.0f), y1), kCollectiveWaitColour);
  char waited[32], label[160];
  format_duration(static_cast<double>(wait.until - wait.collective.open_entered), waited,
                  sizeof(waited));
  std::snprintf(label, sizeof(label), "waiting in %s #%u for %s: the trace ends inside it",
                analysis::comm_kind_name(wait.collective.open_kind), wait.collective.open_sequence,
                waited);
  draw->AddText(ImVec2(std::max(x0, area_x) + 4.0f, y0), IM_COL32(255, 235, 210, 255), label);
}

void TimelinePanel::draw_tracks(LoadedTrace& trace, ViewerState& state, float height) {
  const TraceModel& model = trace.model;
  TimelineIndex& index = trace.timeline;
  shapes_ = index.shapes();
  rows_ = layout_tracks(shapes_, metrics_);

  ImGui::BeginChild("tracks", ImVec2(0, height), false, ImGuiWindowFlags_NoScrollWithMouse);
  if (pending_scroll_y_ >= 0.0f) {
    ImGui::SetScrollY(pending_scroll_y_);
    pending_scroll_y_ = -1.0f;
  }
  ImDrawList* draw = ImGui::GetWindowDrawList();
  ImGuiIO& io = ImGui::GetIO();
  float scroll_y = ImGui::GetScrollY();
  ImVec2 window_pos = ImGui::GetWindowPos();
  float visible_height = ImGui::GetWindowHeight();
  float full_width = ImGui::GetWindowContentRegionMax().x;
  float area_x = window_pos.x + kLabelWidth;
  float width = std::max(full_width - kLabelWidth, 50.0f);
  float content_top = window_pos.y - scroll_y;  // screen y of track-area y = 0
  axis_.set_width(width);
  LayoutProbe& probe = layout_probe();
  probe.timeline_area_x = area_x;
  probe.timeline_area_y = window_pos.y;
  probe.timeline_start_ns = axis_.start_ns();
  probe.timeline_end_ns = axis_.end_ns();
  probe.selected_track = state.selected.track;
  probe.selected_slot = state.selected.slot;
  probe.selected_lane = state.selected.lane;
  probe.timeline_width = width;
  probe.collapsed_tracks = 0;
  probe.wait_shades.clear();
  probe.waits_at_end.clear();
  for (const TimelineTrack& track : index.tracks) probe.collapsed_tracks += track.collapsed;

  // Mouse interaction over the span area.
  bool hovered = ImGui::IsWindowHovered();
  ImVec2 mouse = io.MousePos;
  bool over_spans = hovered && mouse.x >= area_x && mouse.x < area_x + width;
  if (over_spans && io.MouseWheel != 0.0f) {
    if (io.KeyShift) {
      ImGui::SetScrollY(scroll_y - io.MouseWheel * 60.0f);
    } else {
      axis_.zoom_around(mouse.x - area_x, std::pow(1.25, io.MouseWheel));
    }
  }
  if (over_spans && ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
    panning_ = true;
    press_position_ = mouse;
  }
  if (over_spans && ImGui::IsMouseClicked(ImGuiMouseButton_Right)) {
    box_zooming_ = true;
    press_position_ = mouse;
  }
  if (panning_) {
    if (ImGui::IsMouseDown(ImGuiMouseButton_Left)) {
      axis_.pan_pixels(io.MouseDelta.x);
      if (io.MouseDelta.y != 0.0f) ImGui::SetScrollY(scroll_y - io.MouseDelta.y);
    } else {
      panning_ = false;
    }
  }
  if (hovered) handle_keys(area_x, width);

  // Draw list of the visible part.
  build_timeline_frame(model, index, rows_, scroll_y, scroll_y + visible_height, axis_, kFoldPx,
                       frame_);
  draw->PushClipRect(ImVec2(area_x, window_pos.y),
                     ImVec2(area_x + width, window_pos.y + visible_height), true);
  // Alternate step shading behind the spans, to read step boundaries across tracks.
  if (!model.processes.empty()) {
    const auto& steps = model.processes[0].steps;
    // Every other step by position (step numbers may repeat or skip); binary search the first.
    auto first = std::upper_bound(
        steps.begin(), steps.end(), axis_.start_ns(),
        [](double t, const analysis::StepInterval& s) { return t < static_cast<double>(s.end); });
    for (auto it = first; it != steps.end() && static_cast<double>(it->start) < axis_.end_ns();
         ++it) {
      const auto& step = *it;
      if ((it - steps.begin()) % 2) continue;
      float x0 = area_x + static_cast<float>(axis_.time_to_x(static_cast<double>(step.start)));
      float x1 = area_x + static_cast<float>(axis_.time_to_x(static_cast<double>(step.end)));
      draw->AddRectFilled(ImVec2(x0, window_pos.y), ImVec2(x1, window_pos.y + visible_height),
                          IM_COL32(255, 255, 255, 8));
    }
  }
  EventRef hovered_event;
  const LaneDrawItem* hovered_fold = nullptr;
  for (const LaneRun& run : frame_.lane_runs) {
    const TimelineTrack& track = index.tracks[run.track];
    const Lane& lane = track.lanes[run.lane];
    float y0 = content_top + rows_[run.track].content_top +
               metrics_.lane_height * static_cast<float>(run.lane);
    float y1 = y0 + metrics_.lane_height - 1.0f;
    bool mouse_in_lane = over_spans && mouse.y >= y0 && mouse.y < y1;
    for (uint32_t i = run.first_item; i < run.first_item + run.num_items; ++i) {
      const LaneDrawItem& item = frame_.items[i];
      float x0 = area_x + std::max(item.x0, -2.0f);
      float x1 = area_x + std::min(item.x1, width + 2.0f);
      if (item.folded()) {
        draw->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), IM_COL32(110, 116, 128, 255));
        if (x1 - x0 > 40.0f) {
          char label[32];
          std::snprintf(label, sizeof(label), "%u", item.count);
          draw->AddText(ImVec2(x0 + 3, y0 + 2), IM_COL32(20, 20, 20, 255), label);
        }
      } else {
        uint32_t event = lane.event[item.first_slot];
        EventRef ref{static_cast<int>(run.track), static_cast<int>(run.lane), item.first_slot};
        analysis::StringId name = summarize_event(model, index, ref).name;
        ImU32 colour = colour_of_event(model, track, event, name);
        draw->AddRectFilled(ImVec2(x0, y0), ImVec2(std::max(x1, x0 + 1.0f), y1), colour);
        if (track.kind == TimelineTrackKind::kCommunicator) {
          draw_collective_wait(draw, trace, track, event, axis_, area_x, x0,
                               std::max(x1, x0 + 1.0f), y0, y1);
        }
        if (x1 - x0 > 24.0f) {
          draw->PushClipRect(ImVec2(std::max(x0, area_x), y0), ImVec2(x1, y1), true);
          draw->AddText(ImVec2(std::max(x0, area_x) + 3, y0 + 2), IM_COL32(15, 15, 15, 255),
                        model.name(name).c_str());
          draw->PopClipRect();
        }
        if (ref == state.selected) {
          draw->AddRect(ImVec2(x0 - 1, y0 - 1), ImVec2(std::max(x1, x0 + 1.0f) + 1, y1 + 1),
                        IM_COL32(255, 255, 255, 255), 0.0f, 0, 2.0f);
        }
      }
      if (mouse_in_lane && mouse.x >= x0 - 1.5f && mouse.x <= std::max(x1, x0 + 1.0f) + 1.5f) {
        if (item.folded()) {
          hovered_fold = &item;
        } else {
          hovered_event = {static_cast<int>(run.track), static_cast<int>(run.lane),
                           item.first_slot};
        }
      }
    }
  }
  // Counter plots and the stacked memory tracks.
  for (const PlotRun& run : frame_.plot_runs) {
    draw_plot_run(draw, model, index, frame_, run, area_x,
                  content_top + rows_[run.track].content_top + 2.0f,
                  content_top + rows_[run.track].bottom - 2.0f);
  }
  // Flow arrows of the selection: launch -> GPU work.
  update_selected_flows(trace, state);
  for (const analysis::FlowArrow& flow : selected_arrows_) {
    int from_track = index.find_track(flow.from), to_track = index.find_track(flow.to);
    if (from_track < 0 || to_track < 0) continue;
    auto lane_y = [&](int t, analysis::TimeNs time) {
      const TimelineTrack& track = index.tracks[static_cast<size_t>(t)];
      int lane_index = 0;
      for (size_t l = 0; l < track.lanes.size(); ++l) {
        if (hit_test_lane(track.lanes[l], static_cast<double>(time), 0.0) >= 0)
          lane_index = static_cast<int>(l);
      }
      if (track.collapsed)
        return content_top + rows_[static_cast<size_t>(t)].top + metrics_.header_height * 0.5f;
      return content_top + rows_[static_cast<size_t>(t)].content_top +
             metrics_.lane_height * (static_cast<float>(lane_index) + 0.5f);
    };
    ImVec2 a(area_x + static_cast<float>(axis_.time_to_x(static_cast<double>(flow.from_time))),
             lane_y(from_track, flow.from_time));
    ImVec2 b(area_x + static_cast<float>(axis_.time_to_x(static_cast<double>(flow.to_time))),
             lane_y(to_track, flow.to_time));
    ImU32 colour = IM_COL32(255, 230, 90, 230);
    draw->AddBezierCubic(a, ImVec2(a.x + 30, a.y), ImVec2(b.x - 30, b.y), b, colour, 1.5f);
    draw->AddTriangleFilled(b, ImVec2(b.x - 7, b.y - 4), ImVec2(b.x - 7, b.y + 4), colour);
  }
  // Flight-recorder dumps: where each process's trigger fired (a red line across every track).
  for (const auto& process : model.processes) {
    for (const auto& trigger : process.triggers) {
      double t = static_cast<double>(trigger.time);
      if (t < axis_.start_ns() || t > axis_.end_ns()) continue;
      float x = area_x + static_cast<float>(axis_.time_to_x(t));
      draw->AddLine(ImVec2(x, window_pos.y), ImVec2(x, window_pos.y + visible_height),
                    IM_COL32(235, 64, 52, 220), 2.0f);
      char label[96];
      std::snprintf(label, sizeof(label), "trigger: %s (rank %d)",
                    analysis::trigger_reason_name(trigger.reason), process.rank);
      draw->AddText(ImVec2(x + 4, window_pos.y + 2), IM_COL32(255, 110, 100, 255), label);
    }
  }
  // A hung job: what each rank waits in as its trace ends, from its entry to the recording's end.
  for (const WaitAtEnd& wait : trace.waits_at_end) {
    draw_wait_at_end(draw, trace, wait, area_x, content_top);
  }
  // Box zoom rectangle.
  if (box_zooming_) {
    draw->AddRectFilled(ImVec2(std::min(press_position_.x, mouse.x), window_pos.y),
                        ImVec2(std::max(press_position_.x, mouse.x), window_pos.y + visible_height),
                        IM_COL32(120, 170, 255, 50));
    if (!ImGui::IsMouseDown(ImGuiMouseButton_Right)) {
      box_zooming_ = false;
      axis_.box_zoom(press_position_.x - area_x, mouse.x - area_x);
    }
  }
  draw->PopClipRect();

  // Track headers and labels in the left column (and a header band across the span area).
  for (size_t t = 0; t < index.tracks.size(); ++t) {
    const TrackRows& row = rows_[t];
    float top = content_top + row.top;
    if (top > window_pos.y + visible_height || content_top + row.bottom < window_pos.y) continue;
    TimelineTrack& track = index.tracks[t];
    bool new_rank = t == 0 || index.tracks[t - 1].process != track.process;
    draw->AddRectFilled(ImVec2(window_pos.x, top),
                        ImVec2(area_x + width, top + metrics_.header_height),
                        new_rank ? IM_COL32(52, 58, 74, 255) : IM_COL32(40, 44, 52, 255));
    draw->AddRectFilled(ImVec2(window_pos.x, top + metrics_.header_height),
                        ImVec2(area_x - 4, content_top + row.bottom), IM_COL32(32, 34, 40, 255));
    draw->AddText(ImVec2(window_pos.x + 4, top + 2), IM_COL32(220, 220, 220, 255),
                  track.collapsed ? "+" : "-");
    draw->PushClipRect(ImVec2(window_pos.x, top),
                       ImVec2(area_x + width, top + metrics_.header_height), true);
    draw->AddText(ImVec2(window_pos.x + 18, top + 2), IM_COL32(230, 230, 230, 255),
                  track.label.c_str());
    draw->PopClipRect();
    if (hovered && mouse.y >= top && mouse.y < top + metrics_.header_height && mouse.x < area_x &&
        ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
      track.collapsed = !track.collapsed;
    }
  }
  ImGui::Dummy(ImVec2(full_width, tracks_height(rows_) + 8.0f));

  // Tooltip and click-to-select (a click is a press and release without dragging).
  if (hovered_fold != nullptr) {
    ImGui::SetTooltip("%u events folded (zoom in to see them)", hovered_fold->count);
  } else if (hovered_event.valid()) {
    ImGui::BeginTooltip();
    show_event(model, index, hovered_event, false);
    show_collective_wait(trace, hovered_event);
    ImGui::EndTooltip();
  }
  if (over_spans && ImGui::IsMouseReleased(ImGuiMouseButton_Left) &&
      std::fabs(mouse.x - press_position_.x) < 3.0f &&
      std::fabs(mouse.y - press_position_.y) < 3.0f) {
    state.selected = hovered_event;
    if (hovered_fold != nullptr && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
      axis_.box_zoom(hovered_fold->x0, hovered_fold->x1);
    }
  }
  ImGui::EndChild();
}

void TimelinePanel::draw_details(const LoadedTrace& trace, const ViewerState& state) {
  ImGui::BeginChild("details", ImVec2(0, 0), true);
  if (state.selected.valid() &&
      static_cast<size_t>(state.selected.track) < trace.timeline.tracks.size()) {
    show_event(trace.model, trace.timeline, state.selected, true);
    show_collective_wait(trace, state.selected);
  } else {
    ImGui::TextDisabled("Click a span, kernel or communication op to see its details.");
  }
  ImGui::EndChild();
}

void TimelinePanel::draw(LoadedTrace& trace, ViewerState& state) {
  if (state.pending_focus) {
    axis_.show_range(state.pending_focus->begin_ns, state.pending_focus->end_ns, 0.05);
    if (state.pending_focus->rank >= 0) {
      for (size_t t = 0; t < trace.timeline.tracks.size() && t < rows_.size(); ++t) {
        if (trace.model.processes[trace.timeline.tracks[t].process].rank ==
            state.pending_focus->rank) {
          pending_scroll_y_ = rows_[t].top;
          break;
        }
      }
    }
    state.pending_focus.reset();
  }
  draw_toolbar(trace, state);
  ImVec2 origin = ImGui::GetCursorScreenPos();
  float full_width = ImGui::GetContentRegionAvail().x;
  float width = std::max(full_width - kLabelWidth - ImGui::GetStyle().ScrollbarSize, 50.0f);
  ImGui::Dummy(ImVec2(full_width, 38.0f));
  (void)width;
  draw_ruler(trace, state, ImVec2(origin.x + kLabelWidth, origin.y),
             static_cast<float>(axis_.width_px()));
  float details_height = 112.0f;
  float tracks_area = std::max(ImGui::GetContentRegionAvail().y - details_height, 60.0f);
  draw_tracks(trace, state, tracks_area);
  draw_details(trace, state);
}

}  // namespace moescope::viewer
