#include "compare_panel.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>

#include <imgui.h>

#include "moescope/viewer/heatmap_layout.h"
#include "panel_drawing.h"

namespace moescope::viewer {
namespace {

constexpr ImU32 kBaseColour = IM_COL32(110, 170, 255, 255);
constexpr ImU32 kNextColour = IM_COL32(255, 150, 60, 255);
constexpr ImU32 kLabelColour = IM_COL32(220, 220, 220, 255);

const analysis::DiffRow* step_time_row(const analysis::RunDiff& diff) {
  for (const analysis::DiffRow& row : diff.rows) {
    if (row.section == "step" && row.name == "step time") return &row;
  }
  return nullptr;
}

// One heatmap: `cells` [layer row][expert] coloured by `colour_of(value)`.
template <typename ColourOf>
GridLayout draw_grid(ImDrawList* draw, const RunComparison& comparison,
                     const std::vector<double>& cells, ImVec2 origin, ImVec2 size,
                     const char* title, bool with_layer_labels, ColourOf colour_of) {
  draw->AddText(origin, kLabelColour, title);
  const float label_width = with_layer_labels ? 56.0f : 4.0f;
  GridLayout grid =
      layout_grid(origin.x, origin.y + 18.0f, size.x, size.y - 18.0f, comparison.num_layers(),
                  comparison.num_experts, label_width, 18.0f, 48.0f);
  for (int row = 0; row < comparison.num_layers(); ++row) {
    if (with_layer_labels) {
      char label[24];
      std::snprintf(label, sizeof(label), "layer %u",
                    comparison.layer_ids[static_cast<size_t>(row)]);
      draw->AddText(ImVec2(origin.x, grid.cell_y(row) + 0.5f * grid.cell_height - 7), kLabelColour,
                    label);
    }
    for (int expert = 0; expert < comparison.num_experts; ++expert) {
      ImVec2 a(grid.cell_x(expert), grid.cell_y(row));
      ImVec2 b(a.x + grid.cell_width - 1.0f, a.y + grid.cell_height - 1.0f);
      draw->AddRectFilled(a, b, packed_rgba(colour_of(cells[comparison.cell(row, expert)])));
    }
  }
  const int label_every = std::max(1, static_cast<int>(std::ceil(22.0f / grid.cell_width)));
  for (int expert = 0; expert < comparison.num_experts; expert += label_every) {
    char label[16];
    std::snprintf(label, sizeof(label), "%d", expert);
    draw->AddText(ImVec2(grid.cell_x(expert) + 2, grid.top - 16), kLabelColour, label);
  }
  return grid;
}

}  // namespace

void ComparePanel::draw(const LoadedTrace& base, const LoadedTrace& next,
                        const RunComparison& comparison) {
  const analysis::RunDiff& diff = comparison.diff;
  ImGui::Text(
      "base: %zu file(s), %zu rank(s), %zu steps compared    new: %zu file(s), %zu "
      "rank(s), %zu steps compared",
      base.files.size(), diff.base.ranks, diff.base.steps, next.files.size(), diff.next.ranks,
      diff.next.steps);
  if (const analysis::DiffRow* row = step_time_row(diff)) {
    const bool known = row->interval.known;
    ImGui::Text(
        "step time %.2f -> %.2f ms: %+.2f ms [%+.2f, %+.2f], %s; %zu of %zu rows differ "
        "beyond the noise (moescope diff)",
        row->base.mean, row->next.mean, row->interval.difference, row->interval.low,
        row->interval.high,
        !known                         ? "too few steps"
        : !row->interval.significant   ? "inside the noise"
        : row->interval.difference < 0 ? "faster"
                                       : "slower",
        diff.significant(), diff.rows_compared);
  }
  const ImVec2 available = ImGui::GetContentRegionAvail();
  const float heatmap_height = std::max(available.y * 0.5f, 140.0f);
  if (comparison.num_layers() > 0) {
    draw_heatmaps(comparison, heatmap_height);
  } else {
    ImGui::TextDisabled("Neither run has expert-load samples.");
    layout_probe().compare_heatmaps = {};
  }
  draw_step_chart(comparison);
}

void ComparePanel::draw_heatmaps(const RunComparison& comparison, float height) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float width = ImGui::GetContentRegionAvail().x;
  const float legend_width = 90.0f;
  const float panel_width = (width - 2 * legend_width) / 3.0f;
  const double scale = comparison.max_per_step;
  auto heat = [&](double value) { return heat_colour(scale > 0 ? value / scale : 0.0); };
  auto delta = [&](double value) {
    return delta_colour(comparison.max_abs_delta > 0 ? value / comparison.max_abs_delta : 0.0);
  };
  LayoutProbe& probe = layout_probe();
  probe.compare_heatmaps.clear();
  probe.compare_heatmaps.push_back(draw_grid(draw, comparison, comparison.base_per_step, origin,
                                             ImVec2(panel_width, height),
                                             "base: tokens per expert per step", true, heat));
  const float next_x = origin.x + panel_width;
  probe.compare_heatmaps.push_back(draw_grid(draw, comparison, comparison.next_per_step,
                                             ImVec2(next_x, origin.y), ImVec2(panel_width, height),
                                             "new: tokens per expert per step", false, heat));
  const GridLayout& next_grid = probe.compare_heatmaps.back();
  draw_colour_legend(
      draw, ImVec2(next_grid.cell_x(comparison.num_experts) + 10, next_grid.top),
      ImVec2(14.0f, std::min(next_grid.cell_height * comparison.num_layers(), 180.0f)), scale,
      "tok");
  const float delta_x = origin.x + 2 * panel_width + legend_width;
  probe.compare_heatmaps.push_back(draw_grid(draw, comparison, comparison.delta_per_step,
                                             ImVec2(delta_x, origin.y), ImVec2(panel_width, height),
                                             "new - base (blue fewer, red more)", false, delta));
  const GridLayout& delta_grid = probe.compare_heatmaps.back();
  char label[48];
  std::snprintf(label, sizeof(label), "+/-%.0f tok", comparison.max_abs_delta);
  draw->AddText(ImVec2(delta_grid.cell_x(comparison.num_experts) + 8, delta_grid.top), kLabelColour,
                label);
  // The cell under the mouse: both runs' tokens and the difference.
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (const GridLayout& grid : probe.compare_heatmaps) {
    int row = -1, expert = -1;
    if (ImGui::IsWindowHovered() && grid.cell_at(mouse.x, mouse.y, row, expert)) {
      const size_t cell = comparison.cell(row, expert);
      ImGui::SetTooltip("layer %u, expert %d: %.1f -> %.1f tokens per step (%+.1f)",
                        comparison.layer_ids[static_cast<size_t>(row)], expert,
                        comparison.base_per_step[cell], comparison.next_per_step[cell],
                        comparison.delta_per_step[cell]);
    }
  }
  probe.compare_layers = comparison.layer_ids;
  probe.compare_delta = comparison.delta_per_step;
  // As tall as the cells drawn (at most `height`): the chart gets the rest.
  float bottom = origin.y;
  for (const GridLayout& grid : probe.compare_heatmaps) {
    bottom = std::max(bottom, grid.cell_y(grid.rows));
  }
  ImGui::Dummy(ImVec2(width, std::min(bottom - origin.y, height) + 10.0f));
}

void ComparePanel::draw_step_chart(const RunComparison& comparison) {
  const analysis::RunSide& base = comparison.diff.base;
  const analysis::RunSide& next = comparison.diff.next;
  ImGui::Text("Step time per step (ms, mean over ranks):");
  ImGui::SameLine();
  ImGui::TextColored(ImColor(kBaseColour), "base");
  ImGui::SameLine();
  ImGui::TextColored(ImColor(kNextColour), "new");
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const ImVec2 size(ImGui::GetContentRegionAvail().x - 8.0f,
                    std::max(ImGui::GetContentRegionAvail().y - 8.0f, 80.0f));
  draw->AddRectFilled(origin, ImVec2(origin.x + size.x, origin.y + size.y),
                      IM_COL32(26, 28, 32, 255));
  LayoutProbe& probe = layout_probe();
  probe.compare_chart = {origin.x, origin.y, size.x, size.y};
  probe.compare_base_step_ms = base.step_ms;
  probe.compare_next_step_ms = next.step_ms;
  const size_t steps = std::max(base.step_ms.size(), next.step_ms.size());
  if (steps == 0) return;
  double max_ms = 0;
  for (const auto* series : {&base.step_ms, &next.step_ms}) {
    for (double ms : *series) max_ms = std::max(max_ms, ms);
  }
  max_ms = std::max(max_ms * 1.1, 1e-3);
  // x: the step's position in its run (runs may number steps differently); y: ms from 0.
  const float left = origin.x + 48.0f, right = origin.x + size.x - 8.0f;
  const float top = origin.y + 8.0f, bottom = origin.y + size.y - 18.0f;
  auto x_of = [&](size_t index) {
    return left + (right - left) * static_cast<float>(index) /
                      static_cast<float>(std::max<size_t>(steps - 1, 1));
  };
  auto y_of = [&](double ms) { return bottom - static_cast<float>(ms / max_ms) * (bottom - top); };
  for (double tick : {0.0, 0.5 * max_ms, max_ms}) {
    char label[24];
    std::snprintf(label, sizeof(label), "%.1f", tick);
    draw->AddText(ImVec2(origin.x + 4, y_of(tick) - 7), IM_COL32(170, 170, 170, 255), label);
    draw->AddLine(ImVec2(left, y_of(tick)), ImVec2(right, y_of(tick)), IM_COL32(60, 60, 60, 255));
  }
  for (const auto& [series, colour] :
       {std::pair{&base.step_ms, kBaseColour}, std::pair{&next.step_ms, kNextColour}}) {
    for (size_t i = 0; i + 1 < series->size(); ++i) {
      draw->AddLine(ImVec2(x_of(i), y_of((*series)[i])),
                    ImVec2(x_of(i + 1), y_of((*series)[i + 1])), colour, 2.0f);
    }
    if (series->size() == 1) {
      draw->AddCircleFilled(ImVec2(x_of(0), y_of(series->front())), 3.0f, colour);
    }
  }
  char last[32];
  std::snprintf(last, sizeof(last), "step %zu", steps);
  draw->AddText(ImVec2(left, bottom + 2), IM_COL32(170, 170, 170, 255), "step 1");
  draw->AddText(ImVec2(right - 60, bottom + 2), IM_COL32(170, 170, 170, 255), last);
  ImGui::Dummy(size);
}

}  // namespace moescope::viewer
