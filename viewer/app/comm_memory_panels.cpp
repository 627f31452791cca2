// Communication (rank x rank all-to-all bytes, bandwidth) and memory (usage by category over
// time, peak, live blocks at the peak) panels.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <iterator>

#include <imgui.h>

#include "moe_panels.h"
#include "moescope/viewer/heatmap_layout.h"
#include "moescope/viewer/time_axis.h"
#include "panel_drawing.h"

namespace moescope::viewer {

namespace {

uint64_t total_bytes(const analysis::AllToAllMatrix& matrix) {
  uint64_t total = 0;
  for (uint64_t bytes : matrix.bytes) total += bytes;
  return total;
}

}  // namespace

void CommPanel::draw(const LoadedTrace& trace, ViewerState& state) {
  // Every rank: the matrix compares ranks, only the step range narrows it.
  const StepRankFilter all_ranks{state.filter.step_first, state.filter.step_last, -1};
  if (comm_for_.changes_to(trace, all_ranks)) {
    comm_ = analysis::analyze_communication(trace.model, all_ranks);
    matrix_index_ = 0;
    for (size_t i = 1; i < comm_.all_to_all.size(); ++i) {
      if (total_bytes(comm_.all_to_all[i]) >
          total_bytes(comm_.all_to_all[static_cast<size_t>(matrix_index_)])) {
        matrix_index_ = static_cast<int>(i);
      }
    }
  }
  if (comm_.all_to_all.empty()) {
    ImGui::TextDisabled("No all-to-all operations in this trace (or in the selected steps).");
    layout_probe().comm_matrix = {};
    return;
  }
  if (comm_.all_to_all.size() > 1) {
    ImGui::SetNextItemWidth(260.0f);
    char current[48];
    std::snprintf(current, sizeof(current), "communicator %zu of %zu",
                  static_cast<size_t>(matrix_index_) + 1, comm_.all_to_all.size());
    if (ImGui::BeginCombo("##communicator", current)) {
      for (size_t i = 0; i < comm_.all_to_all.size(); ++i) {
        char label[64];
        std::snprintf(label, sizeof(label), "communicator %zu (%d ranks, %u ops)", i + 1,
                      comm_.all_to_all[i].num_ranks, comm_.all_to_all[i].num_ops);
        if (ImGui::Selectable(label, static_cast<int>(i) == matrix_index_)) {
          matrix_index_ = static_cast<int>(i);
        }
      }
      ImGui::EndCombo();
    }
  }
  const analysis::AllToAllMatrix& matrix = comm_.all_to_all[static_cast<size_t>(matrix_index_)];
  const size_t n = static_cast<size_t>(matrix.num_ranks);
  const double max_bytes = static_cast<double>(matrix.max_bytes());
  const uint64_t total_ops = matrix.num_ops;
  LayoutProbe& shown = layout_probe();
  shown.comm_bytes.assign(n, {});
  for (size_t row = 0; row < n; ++row) {
    shown.comm_bytes[row].assign(matrix.bytes.begin() + static_cast<std::ptrdiff_t>(row * n),
                                 matrix.bytes.begin() + static_cast<std::ptrdiff_t>((row + 1) * n));
  }
  shown.comm_ops_by_rank = matrix.ops_by_rank;
  shown.comm_sent_bytes = matrix.sent_bytes;
  shown.comm_busy_ns = matrix.busy_ns;
  ImGui::Text("All-to-all bytes sent, row = sender rank, column = receiver rank (%" PRIu64 " ops)",
              total_ops);
  ImDrawList* draw = ImGui::GetWindowDrawList();
  ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 available = ImGui::GetContentRegionAvail();
  float matrix_side = std::min(available.x * 0.55f, available.y - 10.0f);
  GridLayout grid = layout_grid(origin.x, origin.y, matrix_side, matrix_side, static_cast<int>(n),
                                static_cast<int>(n), 60.0f, 22.0f, 120.0f);
  layout_probe().comm_matrix = grid;
  int hover_row = -1, hover_column = -1;
  ImVec2 mouse = ImGui::GetIO().MousePos;
  bool hovering =
      ImGui::IsWindowHovered() && grid.cell_at(mouse.x, mouse.y, hover_row, hover_column);
  for (size_t row = 0; row < n; ++row) {
    char label[32];
    std::snprintf(label, sizeof(label), "rank %zu", row);
    draw->AddText(ImVec2(origin.x, grid.centre_y(static_cast<int>(row)) - 7),
                  IM_COL32(220, 220, 220, 255), label);
    draw->AddText(ImVec2(grid.cell_x(static_cast<int>(row)) + 4, grid.top - 18),
                  IM_COL32(220, 220, 220, 255), label);
    for (size_t column = 0; column < n; ++column) {
      double bytes = static_cast<double>(matrix.bytes[row * n + column]);
      double value = max_bytes > 0 ? bytes / max_bytes : 0.0;
      ImVec2 a(grid.cell_x(static_cast<int>(column)), grid.cell_y(static_cast<int>(row)));
      ImVec2 b(a.x + grid.cell_width - 2.0f, a.y + grid.cell_height - 2.0f);
      draw->AddRectFilled(a, b, packed_rgba(heat_colour(value)));
      if (grid.cell_width > 60.0f) {
        std::string text = format_bytes(bytes);
        ImU32 ink = value > 0.6 ? IM_COL32(0, 0, 0, 255) : IM_COL32(240, 240, 240, 255);
        draw->AddText(ImVec2(a.x + 6, a.y + 0.5f * grid.cell_height - 7), ink, text.c_str());
      }
    }
  }
  draw_colour_legend(draw, ImVec2(grid.cell_x(static_cast<int>(n)) + 12.0f, grid.top),
                     ImVec2(14.0f, grid.cell_height * static_cast<float>(n)),
                     max_bytes / (1024.0 * 1024.0), "MiB");
  if (hovering) {
    ImGui::SetTooltip(
        "rank %d -> rank %d: %s", hover_row, hover_column,
        format_bytes(static_cast<double>(matrix.at(hover_row, hover_column))).c_str());
  }
  // Per-rank bandwidth table to the right of the matrix.
  ImGui::SetCursorScreenPos(ImVec2(grid.cell_x(static_cast<int>(n)) + 120.0f, origin.y));
  ImGui::BeginGroup();
  ImGui::Text("Achieved bandwidth per sending rank");
  if (ImGui::BeginTable("bandwidth", 5, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg,
                        ImVec2(420.0f, 0))) {
    for (const char* header : {"rank", "ops", "sent", "time in ops", "GB/s"})
      ImGui::TableSetupColumn(header);
    ImGui::TableHeadersRow();
    double best = 0.0;
    for (int32_t row = 0; row < matrix.num_ranks; ++row) {
      best = std::max(best, matrix.bandwidth_gbps(row));
    }
    for (size_t row = 0; row < n; ++row) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%zu", row);
      ImGui::TableNextColumn();
      ImGui::Text("%u", matrix.ops_by_rank[row]);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(matrix.sent_bytes[row])).c_str());
      ImGui::TableNextColumn();
      char busy[32];
      format_duration(matrix.busy_ns[row], busy, sizeof(busy));
      ImGui::TextUnformatted(busy);
      ImGui::TableNextColumn();
      double gbps = matrix.bandwidth_gbps(static_cast<int32_t>(row));
      // The slowest rank stands out: the others wait for it in every all-to-all.
      if (best > 0 && gbps < 0.7 * best) {
        ImGui::TextColored(ImVec4(1.0f, 0.45f, 0.35f, 1.0f), "%.2f", gbps);
      } else {
        ImGui::Text("%.2f", gbps);
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndGroup();
  ImGui::SetCursorScreenPos(ImVec2(origin.x, grid.cell_y(static_cast<int>(n)) + 8.0f));
  ImGui::Dummy(ImVec2(1, 1));
}

void MemoryPanel::draw(const LoadedTrace& trace, ViewerState& state) {
  const auto& model = trace.model;
  int process_index = state.filter.rank >= 0 ? model.process_of_rank(state.filter.rank) : 0;
  if (process_index < 0 || model.processes.empty()) {
    ImGui::TextDisabled("No such rank.");
    return;
  }
  const auto& process = model.processes[static_cast<size_t>(process_index)];
  const auto& usage = process.memory_usage;
  if (usage.times.empty()) {
    ImGui::TextDisabled("No memory events recorded for rank %d.", process.rank);
    layout_probe().memory_peak_x = -1.0f;
    return;
  }
  if (peak_for_.changes_to(trace, process_index)) {
    peak_ = analysis::analyze_rank_memory(process, 12);
  }
  LayoutProbe& shown = layout_probe();
  shown.memory_rank = process.rank;
  shown.memory_peak_bytes = peak_.peak_bytes;
  shown.memory_peak_by_category.assign(std::begin(peak_.peak_by_category),
                                       std::end(peak_.peak_by_category));
  shown.memory_live_at_peak = peak_.live_at_peak;
  ImGui::Text("Memory in use on rank %d by category (peak %s)", process.rank,
              format_bytes(static_cast<double>(peak_.peak_bytes)).c_str());
  ImDrawList* draw = ImGui::GetWindowDrawList();
  ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 available = ImGui::GetContentRegionAvail();
  ImVec2 plot(available.x - 170.0f, std::max(available.y * 0.5f, 120.0f));
  draw->AddRectFilled(origin, ImVec2(origin.x + plot.x, origin.y + plot.y),
                      IM_COL32(26, 28, 32, 255));
  TimeAxis axis(static_cast<double>(usage.times.front()),
                static_cast<double>(std::max(usage.times.back(), usage.times.front() + 1)), plot.x);
  double scale =
      peak_.peak_bytes > 0 ? (plot.y - 4.0) / static_cast<double>(peak_.peak_bytes) / 1.05 : 0.0;
  // Stacked bars per 2-px column: usage in force at the column's time (binary search).
  for (float x = 0; x < plot.x; x += 2.0f) {
    double time = axis.x_to_time(x);
    auto after =
        std::upper_bound(usage.times.begin(), usage.times.end(), time,
                         [](double t, int64_t sample) { return t < static_cast<double>(sample); });
    if (after == usage.times.begin()) continue;
    size_t sample = static_cast<size_t>(after - usage.times.begin()) - 1;
    float bottom = origin.y + plot.y;
    for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
      if (sample >= usage.by_category[c].size()) continue;
      float height = static_cast<float>(
          static_cast<double>(std::max<int64_t>(usage.by_category[c][sample], 0)) * scale);
      if (height <= 0) continue;
      draw->AddRectFilled(ImVec2(origin.x + x, bottom - height),
                          ImVec2(origin.x + x + 2.0f, bottom), kMemoryCategoryColours[c]);
      bottom -= height;
    }
  }
  float peak_x =
      origin.x + static_cast<float>(axis.time_to_x(static_cast<double>(peak_.peak_time)));
  layout_probe().memory_peak_x = peak_x;
  layout_probe().memory_plot_top = origin.y;
  layout_probe().memory_plot_bottom = origin.y + plot.y;
  draw->AddLine(ImVec2(peak_x, origin.y), ImVec2(peak_x, origin.y + plot.y),
                IM_COL32(255, 60, 60, 255), 2.0f);
  std::string peak_label = "peak " + format_bytes(static_cast<double>(peak_.peak_bytes));
  draw->AddText(ImVec2(std::min(peak_x + 4, origin.x + plot.x - 110), origin.y + 4),
                IM_COL32(255, 120, 120, 255), peak_label.c_str());
  // Legend.
  for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
    ImVec2 at(origin.x + plot.x + 12, origin.y + 18.0f * static_cast<float>(c));
    draw->AddRectFilled(at, ImVec2(at.x + 12, at.y + 12), kMemoryCategoryColours[c]);
    draw->AddText(ImVec2(at.x + 18, at.y - 1), IM_COL32(220, 220, 220, 255),
                  analysis::memory_category_name(c));
  }
  ImGui::Dummy(ImVec2(available.x, plot.y + 6));
  char when[32];
  format_duration(static_cast<double>(peak_.peak_time - model.begin), when, sizeof(when));
  ImGui::Text("At the peak (+%s): %zu live allocations", when, peak_.live_at_peak);
  if (ImGui::BeginTable("peak", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg,
                        ImVec2(360, 0))) {
    ImGui::TableSetupColumn("category");
    ImGui::TableSetupColumn("bytes");
    ImGui::TableHeadersRow();
    for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
      if (peak_.peak_by_category[c] == 0) continue;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(analysis::memory_category_name(c));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(peak_.peak_by_category[c])).c_str());
    }
    ImGui::EndTable();
  }
  ImGui::SameLine();
  if (ImGui::BeginTable("live", 4,
                        ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY,
                        ImVec2(0, std::max(ImGui::GetContentRegionAvail().y, 80.0f)))) {
    for (const char* header : {"largest live blocks", "bytes", "category", "allocated at"})
      ImGui::TableSetupColumn(header);
    ImGui::TableHeadersRow();
    for (const analysis::LiveAllocation& block : peak_.largest_at_peak) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("0x%" PRIx64, block.address);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(format_bytes(static_cast<double>(block.bytes)).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(analysis::memory_category_name(block.category));
      ImGui::TableNextColumn();
      char at[32];
      format_duration(static_cast<double>(block.allocated_at - model.begin), at, sizeof(at));
      ImGui::Text("+%s", at);
    }
    ImGui::EndTable();
  }
}

}  // namespace moescope::viewer
