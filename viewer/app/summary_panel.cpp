#include "summary_panel.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "moe_panels.h"
#include "panel_drawing.h"

namespace moescope::viewer {

namespace {

constexpr float kBarWidth = 360.0f, kBarHeight = 14.0f;

// The breakdown's parts in bar order, with their colours (also the tests' pixel colours).
struct BarPart {
  const char* label;
  double ms;
  ImU32 colour;
  int finding;  // selected by a click on the part; -1 = none
};

// The centre of the last item (the tests click there).
std::pair<float, float> item_centre() {
  const ImVec2 low = ImGui::GetItemRectMin(), high = ImGui::GetItemRectMax();
  return {0.5f * (low.x + high.x), 0.5f * (low.y + high.y)};
}

ImVec4 severity_colour(const std::string& severity) {
  if (severity == "critical") return ImVec4(1.0f, 0.4f, 0.35f, 1.0f);
  if (severity == "warning") return ImVec4(1.0f, 0.75f, 0.3f, 1.0f);
  return ImVec4(0.7f, 0.8f, 0.9f, 1.0f);
}

// One stacked bar of a breakdown; returns the x where each part ends.
std::vector<float> draw_breakdown_bar(const LoadedTrace& trace, ViewerState& state,
                                      const RunSummary& summary, const analysis::StepBreakdown& row,
                                      const char* id) {
  const BarPart parts[] = {
      {"compute", row.compute_ms, kSummaryComputeColour, -1},
      {"exposed communication", row.exposed_communication_ms, kSummaryCommunicationColour,
       summary.exposed_communication_finding},
      {"memcpy", row.memcpy_ms, kSummaryMemcpyColour, -1},
      {"idle", row.idle_ms, kSummaryIdleColour, summary.idle_finding},
  };
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const double total = std::max(row.step_ms, 1e-9);
  std::vector<float> ends;
  float x = origin.x;
  for (size_t i = 0; i < std::size(parts); ++i) {
    const float width = static_cast<float>(std::clamp(parts[i].ms / total, 0.0, 1.0)) * kBarWidth;
    const float end = std::min(x + width, origin.x + kBarWidth);
    ends.push_back(end);
    if (end <= x) continue;
    draw->AddRectFilled(ImVec2(x, origin.y), ImVec2(end, origin.y + kBarHeight), parts[i].colour);
    ImGui::SetCursorScreenPos(ImVec2(x, origin.y));
    ImGui::PushID(id);
    ImGui::PushID(static_cast<int>(i));
    if (ImGui::InvisibleButton("part", ImVec2(end - x, kBarHeight)) && parts[i].finding >= 0) {
      focus_finding(trace, state, parts[i].finding);
    }
    ImGui::PopID();
    ImGui::PopID();
    if (ImGui::IsItemHovered()) {
      ImGui::SetTooltip("%s: %.2f ms per step (%.0f%%)%s", parts[i].label, parts[i].ms,
                        100.0 * parts[i].ms / total,
                        parts[i].finding >= 0 ? "\nclick: its finding" : "");
    }
    x = end;
  }
  ImGui::SetCursorScreenPos(ImVec2(origin.x + kBarWidth + 10.0f, origin.y - 2.0f));
  return ends;
}

}  // namespace

void draw_run_summary(const LoadedTrace& trace, ViewerState& state) {
  LayoutProbe::ShownSummary& shown = layout_probe().summary;
  shown = {};
  if (!trace.tables_ready) {
    ImGui::TextDisabled("Computing the summary and the findings...");
    return;
  }
  const RunSummary& summary = trace.summary;
  shown.drawn = true;
  shown.top = ImGui::GetCursorScreenPos().y;
  // A hang or a flight-recorder trigger comes before any step-time story.
  shown.what_happened = trace.what_happened_headline;
  if (!trace.what_happened_headline.empty()) {
    ImGui::TextColored(ImVec4(1.0f, 0.4f, 0.35f, 1.0f), "What happened");
    ImGui::SameLine();
    ImGui::TextWrapped("%s (the Report tab has each rank's story)",
                       trace.what_happened_headline.c_str());
  }
  if (!summary.ranks.empty()) {
    const analysis::StepBreakdown& mean = summary.mean;
    ImGui::Text("Step time %.2f ms (mean of %zu rank(s)):", mean.step_ms, summary.ranks.size());
    ImGui::SameLine();
    const ImVec2 bar = ImGui::GetCursorScreenPos();
    shown.bar = {bar.x, bar.y, kBarWidth, kBarHeight};
    shown.bar_ends = draw_breakdown_bar(trace, state, summary, mean, "mean");
    ImGui::Text(
        "compute %.2f | exposed comm %.2f | memcpy %.2f | idle %.2f ms; %.2f ms comm hidden",
        mean.compute_ms, mean.exposed_communication_ms, mean.memcpy_ms, mean.idle_ms,
        mean.overlapped_communication_ms);
    shown.breakdown = {mean.step_ms, mean.compute_ms, mean.exposed_communication_ms, mean.memcpy_ms,
                       mean.idle_ms};
  }
  if (summary.chain.empty()) {
    ImGui::TextDisabled("No findings: nothing in this trace crossed a bottleneck rule.");
  }
  for (const SummaryChainEntry& entry : summary.chain) {
    ImGui::TextColored(ImVec4(1.0f, 0.75f, 0.3f, 1.0f), "%s",
                       entry.depth == 0 ? "Root cause" : "  explains");
    ImGui::SameLine(90.0f + 14.0f * static_cast<float>(entry.depth));
    char label[96];
    std::snprintf(label, sizeof(label), "#%d %s##chain%d", entry.id, entry.kind.c_str(),
                  entry.finding);
    ImGui::PushStyleColor(ImGuiCol_Text, severity_colour(entry.severity));
    if (ImGui::SmallButton(label)) focus_finding(trace, state, entry.finding);
    ImGui::PopStyleColor();
    shown.chain_buttons.push_back(item_centre());
    ImGui::SameLine();
    std::string explains;
    for (int32_t id : entry.explains)
      explains += (explains.empty() ? "" : ", #") + std::to_string(id);
    ImGui::Text("%s%s%.2f ms/step%s%s", entry.where.c_str(), entry.where.empty() ? "" : "; ",
                entry.est_ms_per_step, explains.empty() ? "" : "; explains #", explains.c_str());
    shown.chain_ids.push_back(entry.id);
    shown.chain_kinds.push_back(entry.kind);
    shown.chain_ms.push_back(entry.est_ms_per_step);
  }
  if (summary.other_findings > 0) {
    ImGui::TextDisabled("  %zu more finding(s) in the Report tab", summary.other_findings);
  }
  if (summary.hottest.present) {
    const SummaryHotCell& hot = summary.hottest;
    ImGui::TextColored(ImVec4(1.0f, 0.75f, 0.3f, 1.0f), "Hottest cell");
    ImGui::SameLine(90.0f);
    char label[96];
    std::snprintf(label, sizeof(label), "layer %u, expert %d##hottest", hot.layer, hot.expert);
    if (ImGui::SmallButton(label)) {
      if (hot.finding >= 0) focus_finding(trace, state, hot.finding);
      state.focus_layer = static_cast<int>(hot.layer);
      state.focus_expert = hot.expert;
      state.switch_to = Panel::kExperts;
    }
    shown.hottest_button = item_centre();
    ImGui::SameLine();
    ImGui::Text("%.1f%% of the layer's tokens (%.0f tokens)", 100.0 * hot.share, hot.tokens);
    shown.hottest = {static_cast<double>(hot.layer), static_cast<double>(hot.expert), hot.share};
  }
  shown.bottom = ImGui::GetCursorScreenPos().y;
  ImGui::Separator();
}

}  // namespace moescope::viewer
