// The timeline's bar above the tracks: the run summary, the search box and buttons, the time
// ruler and the clickable step ruler (timeline_panel.h).
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "moescope/analysis/finding_links.h"
#include "panel_drawing.h"
#include "summary_panel.h"
#include "timeline_panel.h"

namespace moescope::viewer {

void TimelinePanel::search(LoadedTrace& trace, ViewerState& state, const std::string& text) {
  std::snprintf(search_text_, sizeof(search_text_), "%s", text.c_str());
  searched_ = search_text_;
  matches_ = search_events(trace.model, trace.timeline, searched_);
  match_index_ = matches_.empty() ? -1 : 0;
  if (!matches_.empty()) select_and_show(trace, state, matches_.front());
}

void TimelinePanel::draw_toolbar(LoadedTrace& trace, ViewerState& state) {
  // The story first: where the step time goes, the root cause and what it explains, the
  // hottest expert (summary_panel.h); the report tab has the evidence and the fix of each.
  layout_probe().root_cause = analysis::root_cause_line(trace.findings);
  draw_run_summary(trace, state);
  ImGui::SetNextItemWidth(220.0f);
  bool enter = ImGui::InputTextWithHint("##search", "search by name", search_text_,
                                        sizeof(search_text_), ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  bool previous = ImGui::Button("<");
  ImGui::SameLine();
  bool next = ImGui::Button(">");
  if ((enter || previous || next) && searched_ != search_text_) {
    searched_ = search_text_;
    matches_ = search_events(trace.model, trace.timeline, searched_);
    match_index_ = -1;
  }
  if (!matches_.empty() && (enter || next || previous)) {
    match_index_ = step_match(match_index_, matches_.size(), previous);
    select_and_show(trace, state, matches_[static_cast<size_t>(match_index_)]);
  }
  ImGui::SameLine();
  if (!searched_.empty()) {
    ImGui::Text("%d / %zu", match_index_ + 1, matches_.size());
    ImGui::SameLine();
  }
  if (ImGui::Button("Fit")) axis_.show_all();
  ImGui::SameLine();
  if (ImGui::Button("Collapse all")) {
    for (auto& track : trace.timeline.tracks) track.collapsed = true;
  }
  ImGui::SameLine();
  if (ImGui::Button("Expand all")) {
    for (auto& track : trace.timeline.tracks) track.collapsed = false;
  }
  ImGui::SameLine();
  char visible[32];
  format_duration(axis_.duration_ns(), visible, sizeof(visible));
  ImGui::TextDisabled("%s visible   wheel/W/S zoom, drag/A/D pan, right-drag box zoom", visible);
}

void TimelinePanel::draw_ruler(const LoadedTrace& trace, ViewerState& state, ImVec2 origin,
                               float width) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const float tick_height = 20.0f, step_height = 18.0f;
  draw->AddRectFilled(origin, ImVec2(origin.x + width, origin.y + tick_height),
                      IM_COL32(36, 38, 44, 255));
  RulerTicks ticks = ruler_ticks(axis_, 90.0, static_cast<double>(trace.model.begin));
  for (double time : ticks.times_ns) {
    float x = origin.x + static_cast<float>(axis_.time_to_x(time));
    draw->AddLine(ImVec2(x, origin.y + tick_height - 6), ImVec2(x, origin.y + tick_height),
                  IM_COL32(180, 180, 180, 255));
    char label[32];
    format_tick(time - static_cast<double>(trace.model.begin), ticks.step_ns, label, sizeof(label));
    draw->AddText(ImVec2(x + 3, origin.y + 2), IM_COL32(200, 200, 200, 255), label);
  }
  // Step ruler: the selected rank's steps (else the first rank's), clickable.
  float step_top = origin.y + tick_height;
  layout_probe().step_ruler_y = step_top + 0.5f * step_height;
  draw->AddRectFilled(ImVec2(origin.x, step_top), ImVec2(origin.x + width, step_top + step_height),
                      IM_COL32(28, 30, 34, 255));
  if (trace.model.processes.empty()) return;
  int process_index = state.filter.rank >= 0 ? trace.model.process_of_rank(state.filter.rank) : 0;
  if (process_index < 0) process_index = 0;
  const auto& steps = trace.model.processes[static_cast<size_t>(process_index)].steps;
  ImVec2 mouse = ImGui::GetIO().MousePos;
  bool mouse_in_ruler = mouse.x >= origin.x && mouse.x < origin.x + width && mouse.y >= step_top &&
                        mouse.y < step_top + step_height && ImGui::IsWindowHovered();
  auto first = std::upper_bound(
      steps.begin(), steps.end(), axis_.start_ns(),
      [](double t, const analysis::StepInterval& s) { return t < static_cast<double>(s.end); });
  for (auto it = first; it != steps.end() && static_cast<double>(it->start) < axis_.end_ns();
       ++it) {
    float x0 = origin.x +
               static_cast<float>(std::max(axis_.time_to_x(static_cast<double>(it->start)), -1.0));
    float x1 = origin.x + static_cast<float>(
                              std::min(axis_.time_to_x(static_cast<double>(it->end)), width + 1.0));
    bool selected = state.filter.step_first >= 0 && state.filter.has_step(it->step);
    ImU32 fill = selected ? IM_COL32(70, 110, 170, 255)
                          : ((it - steps.begin()) % 2 ? IM_COL32(58, 62, 72, 255)
                                                      : IM_COL32(48, 52, 60, 255));
    draw->AddRectFilled(ImVec2(x0, step_top + 1),
                        ImVec2(std::max(x1, x0 + 1), step_top + step_height - 1), fill);
    if (x1 - x0 > 50) {
      char label[32];
      std::snprintf(label, sizeof(label), "step %" PRId64, it->step);
      draw->PushClipRect(ImVec2(x0, step_top), ImVec2(x1, step_top + step_height), true);
      draw->AddText(ImVec2(x0 + 4, step_top + 2), IM_COL32(230, 230, 230, 255), label);
      draw->PopClipRect();
    }
    if (mouse_in_ruler && mouse.x >= x0 && mouse.x < x1) {
      char duration[32];
      format_duration(static_cast<double>(it->duration()), duration, sizeof(duration));
      ImGui::SetTooltip("step %" PRId64 ": %s (click: select and zoom)", it->step, duration);
      if (ImGui::IsMouseClicked(ImGuiMouseButton_Left)) {
        state.filter.step_first = state.filter.step_last = it->step;
        axis_.show_range(static_cast<double>(it->start), static_cast<double>(it->end), 0.02);
      }
    }
  }
}

}  // namespace moescope::viewer
