// What ViewerApp draws each frame (viewer_app.h): the menu bar with the load's state, the step
// and rank filter the panels share, the loading overlay and the panels' tabs.
#include <GLFW/glfw3.h>
#include <imgui.h>

#include <algorithm>
#include <cinttypes>
#include <string>

#include "viewer_app.h"

namespace moescope::viewer {

void ViewerApp::draw_menu_and_toolbar() {
  if (ImGui::BeginMenuBar()) {
    if (ImGui::BeginMenu("File")) {
      if (ImGui::MenuItem("Open...", "Ctrl+O")) browser_.open();
      if (ImGui::MenuItem("Quit", "Ctrl+Q")) glfwSetWindowShouldClose(window_, 1);
      ImGui::EndMenu();
    }
    if (trace_ && trace_->preview) {
      // The beginning of the trace is on screen; the rest loads behind it.
      ImGui::TextColored(ImVec4(1.0f, 0.8f, 0.3f, 1.0f),
                         "  preview: the first %" PRIu64 " events of %zu file(s); loading the rest",
                         trace_->model.total_events, trace_->files.size());
      if (loading_) {
        ImGui::SameLine();
        ImGui::ProgressBar(loading_->progress(), ImVec2(160.0f, 0.0f));
      }
    } else if (trace_) {
      ImGui::TextDisabled("  %zu file(s), %zu rank(s), %" PRIu64 " events, loaded in %.2f s",
                          trace_->files.size(), trace_->model.processes.size(),
                          trace_->model.total_events, trace_->load_seconds);
      if (!trace_->model.errors.empty()) {
        ImGui::TextColored(ImVec4(1, 0.6f, 0.3f, 1), "  %zu read problem(s)",
                           trace_->model.errors.size());
        if (ImGui::IsItemHovered()) {
          ImGui::BeginTooltip();
          for (size_t i = 0; i < trace_->model.errors.size() && i < 20; ++i) {
            ImGui::TextUnformatted(trace_->model.errors[i].to_string().c_str());
          }
          ImGui::EndTooltip();
        }
      }
    } else if (overview_.active()) {
      ImGui::TextDisabled(
          "  job overview of %zu rank summaries: click a cell for that rank's detail",
          options_.overview.size());
    } else {
      ImGui::TextDisabled("  drop .moetrace files here or use File > Open");
    }
    ImGui::EndMenuBar();
  }
  if (!trace_) return;
  // Step range and rank shared by the panels.
  const auto& steps = trace_->steps;
  bool all_steps = state_.filter.step_first < 0;
  if (ImGui::Checkbox("all steps", &all_steps)) {
    if (all_steps || steps.empty()) {
      state_.filter.step_first = state_.filter.step_last = -1;
    } else {
      state_.filter.step_first = static_cast<int64_t>(steps.front());
      state_.filter.step_last = static_cast<int64_t>(steps.back());
    }
  }
  if (!all_steps && !steps.empty()) {
    ImGui::SameLine();
    int range[2] = {static_cast<int>(state_.filter.step_first),
                    static_cast<int>(state_.filter.step_last)};
    ImGui::SetNextItemWidth(260.0f);
    if (ImGui::DragInt2("steps", range, 0.2f, static_cast<int>(steps.front()),
                        static_cast<int>(steps.back()))) {
      state_.filter.step_first = std::min(range[0], range[1]);
      state_.filter.step_last = std::max(range[0], range[1]);
    }
  }
  ImGui::SameLine(0, 24);
  ImGui::SetNextItemWidth(120.0f);
  std::string rank_label =
      state_.filter.rank < 0 ? "all ranks" : "rank " + std::to_string(state_.filter.rank);
  if (ImGui::BeginCombo("rank", rank_label.c_str())) {
    if (ImGui::Selectable("all ranks", state_.filter.rank < 0)) state_.filter.rank = -1;
    for (const auto& process : trace_->model.processes) {
      std::string label = "rank " + std::to_string(process.rank);
      if (ImGui::Selectable(label.c_str(), state_.filter.rank == process.rank))
        state_.filter.rank = process.rank;
    }
    ImGui::EndCombo();
  }
}

void ViewerApp::draw_loading_overlay() {
  if (!loading_ && load_error_.empty()) return;
  if (loading_ && trace_ && trace_->preview) return;  // the menu bar shows the progress
  ImVec2 size = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(size.x * 0.5f, size.y * 0.5f), ImGuiCond_Always,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSize(ImVec2(460, 0));
  ImGui::Begin(
      "Loading", nullptr,
      ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoSavedSettings);
  if (loading_) {
    ImGui::Text("Loading %zu file(s): %s", loading_->files().size(), loading_->stage());
    ImGui::ProgressBar(loading_->progress(), ImVec2(-1, 0));
  } else {
    ImGui::TextColored(ImVec4(1, 0.45f, 0.4f, 1), "%s", load_error_.c_str());
    if (ImGui::Button("Dismiss")) load_error_.clear();
  }
  ImGui::End();
}

void ViewerApp::draw_panels() {
  if (!trace_ && !overview_.active()) return;
  if (state_.switch_to) current_panel_ = *state_.switch_to;
  if (ImGui::BeginTabBar("panels")) {
    for (int i = 0; i < static_cast<int>(Panel::kCount); ++i) {
      Panel panel = static_cast<Panel>(i);
      if (panel == Panel::kCompare && !comparison_) continue;
      if (panel == Panel::kOverview ? !overview_.active() : !trace_) continue;
      ImGuiTabItemFlags flags = 0;
      // Programmatic switches (finding clicks, screenshot mode) select the tab once.
      if (state_.switch_to && *state_.switch_to == panel) flags |= ImGuiTabItemFlags_SetSelected;
      if (ImGui::BeginTabItem(panel_title(panel), nullptr, flags)) {
        current_panel_ = panel;
        switch (panel) {
          case Panel::kOverview:
            overview_.draw();
            break;
          case Panel::kTimeline:
            timeline_.draw(*trace_, state_);
            break;
          case Panel::kExperts:
            experts_.draw(*trace_, state_);
            break;
          case Panel::kComm:
            comm_.draw(*trace_, state_);
            break;
          case Panel::kMemory:
            memory_.draw(*trace_, state_);
            break;
          case Panel::kReport:
            report_.draw(*trace_, state_);
            break;
          case Panel::kStats:
            stats_.draw(*trace_, state_);
            break;
          case Panel::kCompare:
            compare_.draw(*trace_, *against_, *comparison_);
            break;
          default:
            break;
        }
        ImGui::EndTabItem();
      }
    }
    ImGui::EndTabBar();
  }
  state_.switch_to.reset();
}

}  // namespace moescope::viewer
