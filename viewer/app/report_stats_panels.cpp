// Report (ranked findings that select their place in the timeline and heatmap) and statistics
// (sortable duration tables of kernels and ranges) panels.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <numeric>
#include <string>

#include <imgui.h>

#include "moe_panels.h"
#include "moescope/viewer/time_axis.h"
#include "panel_drawing.h"

namespace moescope::viewer {

void focus_finding(const LoadedTrace& trace, ViewerState& state, int finding_index) {
  if (finding_index < 0 || static_cast<size_t>(finding_index) >= trace.findings.size()) return;
  const analysis::Finding& finding = trace.findings[static_cast<size_t>(finding_index)];
  const analysis::FindingWhere& where = finding.where;
  state.selected_finding = finding_index;
  state.filter.step_first = where.first_step;
  state.filter.step_last = where.last_step >= 0 ? where.last_step : where.first_step;
  // Expert findings are about the whole expert-parallel group; keep "all ranks" for them.
  state.filter.rank = where.layer >= 0 ? -1 : analysis::finding_rank(trace.model, finding);
  state.focus_layer = where.layer;
  state.focus_expert = where.experts.empty() ? -1 : static_cast<int32_t>(where.experts.front());
  state.pending_focus = finding_time_focus(trace.model, finding);
}

void ReportPanel::draw(const LoadedTrace& trace, ViewerState& state) {
  layout_probe().report_rows = static_cast<int>(trace.findings.size());
  layout_probe().findings.clear();
  for (const analysis::Finding& finding : trace.findings) {
    layout_probe().findings.push_back({finding.kind, analysis::severity_name(finding.severity),
                                       finding.evidence, finding.est_ms_per_step});
  }
  if (!trace.tables_ready) {
    ImGui::TextDisabled("Computing the findings...");
    return;
  }
  if (!trace.what_happened_text.empty() &&
      ImGui::CollapsingHeader("What happened", ImGuiTreeNodeFlags_DefaultOpen)) {
    ImGui::TextUnformatted(trace.what_happened_text.c_str());
  }
  if (trace.findings.empty()) {
    ImGui::TextDisabled("No findings: nothing in this trace crossed a bottleneck rule.");
    return;
  }
  ImGui::Text(
      "Findings ranked by root cause: each cause first, the findings it explains (->) after "
      "it. Click one to select its place in the timeline and heatmap.");
  float details_height = 110.0f;
  if (ImGui::BeginTable(
          "findings", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY,
          ImVec2(0, std::max(ImGui::GetContentRegionAvail().y - details_height, 80.0f)))) {
    ImGui::TableSetupColumn("#", ImGuiTableColumnFlags_WidthFixed, 24.0f);
    ImGui::TableSetupColumn("severity", ImGuiTableColumnFlags_WidthFixed, 64.0f);
    ImGui::TableSetupColumn("ms/step", ImGuiTableColumnFlags_WidthFixed, 64.0f);
    ImGui::TableSetupColumn("kind", ImGuiTableColumnFlags_WidthFixed, 160.0f);
    ImGui::TableSetupColumn("finding");
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < trace.findings.size(); ++i) {
      const analysis::Finding& finding = trace.findings[i];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      char id[24];
      std::snprintf(id, sizeof(id), "%zu", i + 1);
      if (ImGui::Selectable(id, state.selected_finding == static_cast<int>(i),
                            ImGuiSelectableFlags_SpanAllColumns)) {
        focus_finding(trace, state, static_cast<int>(i));
      }
      if (ImGui::IsItemHovered() && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) {
        state.switch_to = finding.where.layer >= 0 ? Panel::kExperts : Panel::kTimeline;
      }
      ImGui::TableNextColumn();
      ImVec4 colour =
          finding.severity == analysis::Severity::kCritical  ? ImVec4(1.0f, 0.4f, 0.35f, 1.0f)
          : finding.severity == analysis::Severity::kWarning ? ImVec4(1.0f, 0.75f, 0.3f, 1.0f)
                                                             : ImVec4(0.7f, 0.8f, 0.9f, 1.0f);
      ImGui::TextColored(colour, "%s", analysis::severity_name(finding.severity));
      ImGui::TableNextColumn();
      ImGui::Text("%.2f", finding.est_ms_per_step);
      ImGui::TableNextColumn();
      // An effect is marked with the cause it follows in the list.
      const std::string kind = finding.explained_by.empty() ? finding.kind : "-> " + finding.kind;
      ImGui::TextUnformatted(kind.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(finding.evidence.c_str());
    }
    ImGui::EndTable();
  }
  ImGui::BeginChild("finding", ImVec2(0, 0), true);
  if (state.selected_finding >= 0 &&
      static_cast<size_t>(state.selected_finding) < trace.findings.size()) {
    const analysis::Finding& finding = trace.findings[static_cast<size_t>(state.selected_finding)];
    ImGui::TextWrapped("Evidence: %s", finding.evidence.c_str());
    if (!finding.chain.empty()) ImGui::TextWrapped("Chain: %s", finding.chain.c_str());
    ImGui::TextWrapped("Suggestion: %s", finding.suggestion.c_str());
    if (ImGui::Button("Show in timeline")) state.switch_to = Panel::kTimeline;
    ImGui::SameLine();
    if (ImGui::Button("Show in expert heatmap")) state.switch_to = Panel::kExperts;
  } else {
    ImGui::TextDisabled("Select a finding to see its evidence and suggestion.");
  }
  ImGui::EndChild();
}

namespace {

// Sortable table of name statistics; `order` keeps the sorted row order between frames.
void statistics_table(const char* id, const LoadedTrace& trace,
                      const std::vector<NameStatistics>& rows, std::vector<size_t>& order,
                      ImVec2 size) {
  if (order.size() != rows.size()) {
    order.resize(rows.size());
    std::iota(order.begin(), order.end(), 0);
  }
  ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg |
                          ImGuiTableFlags_ScrollY | ImGuiTableFlags_Sortable |
                          ImGuiTableFlags_Resizable;
  if (!ImGui::BeginTable(id, 6, flags, size)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableSetupColumn("count", ImGuiTableColumnFlags_WidthFixed, 70.0f);
  ImGui::TableSetupColumn("total",
                          ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_DefaultSort |
                              ImGuiTableColumnFlags_PreferSortDescending,
                          80.0f);
  ImGui::TableSetupColumn("mean", ImGuiTableColumnFlags_WidthFixed, 80.0f);
  ImGui::TableSetupColumn("p50", ImGuiTableColumnFlags_WidthFixed, 80.0f);
  ImGui::TableSetupColumn("p99", ImGuiTableColumnFlags_WidthFixed, 80.0f);
  ImGui::TableHeadersRow();
  if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs();
      specs && specs->SpecsDirty && specs->SpecsCount > 0) {
    const ImGuiTableColumnSortSpecs& spec = specs->Specs[0];
    order = sorted_statistics(trace.model, rows, static_cast<StatisticsColumn>(spec.ColumnIndex),
                              spec.SortDirection == ImGuiSortDirection_Ascending);
    specs->SpecsDirty = false;
  }
  ImGuiListClipper clipper;
  clipper.Begin(static_cast<int>(order.size()));
  while (clipper.Step()) {
    for (int r = clipper.DisplayStart; r < clipper.DisplayEnd; ++r) {
      const NameStatistics& row = rows[order[static_cast<size_t>(r)]];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(trace.model.name(row.name).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%" PRIu64, row.count);
      for (double value : {row.total_ns, row.mean_ns, row.p50_ns, row.p99_ns}) {
        ImGui::TableNextColumn();
        char text[32];
        format_duration(value, text, sizeof(text));
        ImGui::TextUnformatted(text);
      }
    }
  }
  ImGui::EndTable();
}

}  // namespace

void StatsPanel::draw(const LoadedTrace& trace, ViewerState&) {
  if (order_for_.changes_to(trace)) {
    kernel_order_.clear();
    range_order_.clear();
  }
  layout_probe().stats_rows =
      static_cast<int>(trace.kernel_stats.size() + trace.range_stats.size());
  if (!trace.tables_ready) {
    ImGui::TextDisabled("Computing the statistics...");
    return;
  }
  float half = std::max(ImGui::GetContentRegionAvail().y * 0.5f - 24.0f, 80.0f);
  ImGui::Text("GPU kernels and copies (%zu names)", trace.kernel_stats.size());
  statistics_table("kernels", trace, trace.kernel_stats, kernel_order_, ImVec2(0, half));
  ImGui::Text("CPU ranges (%zu names)", trace.range_stats.size());
  statistics_table("ranges", trace, trace.range_stats, range_order_, ImVec2(0, half));
}

}  // namespace moescope::viewer
