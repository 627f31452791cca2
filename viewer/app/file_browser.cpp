#include "file_browser.h"

#include <algorithm>
#include <filesystem>

#include <imgui.h>

#include "moescope/analysis/recorded_files.h"
#include "moescope/analysis/trace_loader.h"
#include "panel_drawing.h"

namespace moescope::viewer {

namespace fs = std::filesystem;

namespace {

bool looks_like_trace(const std::string& name) {
  return analysis::is_moetrace_path(name) || analysis::is_chrome_json_path(name);
}

}  // namespace

void FileBrowser::open() {
  open_ = true;
  if (directory_.empty()) {
    std::error_code error;
    directory_ = fs::current_path(error).string();
  }
  list_directory();
}

void FileBrowser::list_directory() {
  entries_.clear();
  error_.clear();
  std::error_code error;
  for (fs::directory_iterator it(directory_, error), end; !error && it != end;
       it.increment(error)) {
    Entry entry;
    entry.name = it->path().filename().string();
    if (!entry.name.empty() && entry.name[0] == '.') continue;
    std::error_code status_error;
    entry.is_directory = it->is_directory(status_error);
    entry.is_trace = !entry.is_directory && looks_like_trace(entry.name);
    if (entry.is_trace) entry.bytes = it->file_size(status_error);
    entries_.push_back(entry);
  }
  if (error) error_ = "cannot list " + directory_ + ": " + error.message();
  std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    if (a.is_directory != b.is_directory) return a.is_directory;
    return a.name < b.name;
  });
}

bool FileBrowser::draw(std::vector<std::string>& chosen) {
  LayoutProbe& probe = layout_probe();
  probe.browser_open = open_;
  probe.browser_traces.clear();
  probe.browser_checkboxes.clear();
  if (!open_) return false;
  bool confirmed = false;
  ImGui::SetNextWindowSize(ImVec2(640, 440), ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowBgAlpha(1.0f);  // opaque over the timeline
  if (ImGui::Begin("Open traces", &open_)) {
    ImGui::TextWrapped("%s", directory_.c_str());
    if (ImGui::Button("Up")) {
      directory_ = fs::path(directory_).parent_path().string();
      list_directory();
    }
    ImGui::SameLine();
    ImGui::TextDisabled("tick every rank's file to open them together");
    if (!error_.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", error_.c_str());
    ImGui::BeginChild("entries", ImVec2(0, -32), true);
    std::string enter;
    for (Entry& entry : entries_) {
      if (entry.is_directory) {
        if (ImGui::Selectable((entry.name + "/").c_str(), false,
                              ImGuiSelectableFlags_AllowDoubleClick) &&
            ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
          enter = entry.name;
        }
      } else if (entry.is_trace) {
        ImGui::Checkbox(entry.name.c_str(), &entry.ticked);
        ImVec2 box_min = ImGui::GetItemRectMin();
        float box = ImGui::GetFrameHeight();
        probe.browser_traces.push_back(entry.name);
        probe.browser_checkboxes.emplace_back(box_min.x + 0.5f * box, box_min.y + 0.5f * box);
        ImGui::SameLine();
        ImGui::TextDisabled("%s", format_bytes(static_cast<double>(entry.bytes)).c_str());
      } else {
        ImGui::TextDisabled("%s", entry.name.c_str());
      }
    }
    ImGui::EndChild();
    if (!enter.empty()) {
      directory_ = (fs::path(directory_) / enter).string();
      list_directory();
    }
    bool open_clicked = ImGui::Button("Open ticked");
    ImVec2 button_min = ImGui::GetItemRectMin(), button_max = ImGui::GetItemRectMax();
    probe.browser_open_button = {0.5f * (button_min.x + button_max.x),
                                 0.5f * (button_min.y + button_max.y)};
    if (open_clicked) {
      chosen.clear();
      for (const Entry& entry : entries_) {
        if (entry.ticked) chosen.push_back((fs::path(directory_) / entry.name).string());
      }
      confirmed = !chosen.empty();
      if (confirmed) open_ = false;
    }
    ImGui::SameLine();
    if (ImGui::Button("Cancel")) open_ = false;
  }
  ImGui::End();
  return confirmed;
}

}  // namespace moescope::viewer
