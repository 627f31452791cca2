#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include <imgui.h>

#include "moe_panels.h"
#include "moescope/viewer/heatmap_layout.h"
#include "panel_drawing.h"

namespace moescope::viewer {

namespace {

ImU32 layer_colour(size_t row, size_t rows) {
  float hue = rows > 0 ? static_cast<float>(row) / static_cast<float>(rows) : 0.0f;
  return static_cast<ImU32>(ImColor::HSV(hue * 0.85f, 0.6f, 0.95f));
}

}  // namespace

void ExpertsPanel::draw(const LoadedTrace& trace, ViewerState& state) {
  if (heatmap_for_.changes_to(trace, state.filter)) {
    heatmap_ = analysis::expert_load_matrix(trace.model, state.filter);
  }
  if (imbalance_for_.changes_to(trace, state.filter.rank)) {
    // Over every step: the plot is the step axis.
    imbalance_ =
        imbalance_series(analysis::analyze_expert_load(trace.model, {-1, -1, state.filter.rank}));
  }
  LayoutProbe& shown = layout_probe();
  shown.heatmap_layers = heatmap_.layer_ids;
  shown.heatmap_tokens.clear();
  for (int row = 0; row < heatmap_.num_layers(); ++row) {
    const auto begin =
        heatmap_.tokens.begin() + static_cast<std::ptrdiff_t>(row) * heatmap_.num_experts;
    shown.heatmap_tokens.emplace_back(begin, begin + heatmap_.num_experts);
  }
  shown.imbalance_steps = imbalance_.steps;
  shown.imbalance_values = imbalance_.per_layer;
  if (heatmap_.num_layers() == 0) {
    ImGui::TextDisabled("No expert-load samples in this trace (or in the selected steps).");
    layout_probe().expert_heatmap = {};
    return;
  }
  ImGui::Text(
      "Tokens per expert, %" PRId64 " step(s), %s", heatmap_.num_steps,
      state.filter.rank < 0 ? "all ranks" : ("rank " + std::to_string(state.filter.rank)).c_str());
  ImDrawList* draw = ImGui::GetWindowDrawList();
  ImVec2 origin = ImGui::GetCursorScreenPos();
  ImVec2 available = ImGui::GetContentRegionAvail();
  float heatmap_height = std::max(available.y * 0.58f, 120.0f);
  float legend_width = 110.0f;
  GridLayout grid = layout_grid(origin.x, origin.y, available.x - legend_width, heatmap_height,
                                heatmap_.num_layers(), heatmap_.num_experts, 64.0f, 20.0f, 64.0f);
  layout_probe().expert_heatmap = grid;
  ImVec2 mouse = ImGui::GetIO().MousePos;
  int hover_row = -1, hover_column = -1;
  bool hovering =
      ImGui::IsWindowHovered() && grid.cell_at(mouse.x, mouse.y, hover_row, hover_column);
  for (int row = 0; row < heatmap_.num_layers(); ++row) {
    char label[32];
    std::snprintf(label, sizeof(label), "layer %u", heatmap_.layer_ids[static_cast<size_t>(row)]);
    draw->AddText(ImVec2(origin.x, grid.cell_y(row) + 0.5f * grid.cell_height - 7),
                  IM_COL32(220, 220, 220, 255), label);
    for (int expert = 0; expert < heatmap_.num_experts; ++expert) {
      double value = heatmap_.max_tokens > 0 ? heatmap_.at(row, expert) / heatmap_.max_tokens : 0.0;
      ImVec2 a(grid.cell_x(expert), grid.cell_y(row));
      ImVec2 b(a.x + grid.cell_width - 1.0f, a.y + grid.cell_height - 1.0f);
      draw->AddRectFilled(a, b, packed_rgba(heat_colour(value)));
    }
  }
  int label_every = std::max(1, static_cast<int>(std::ceil(22.0f / grid.cell_width)));
  for (int expert = 0; expert < heatmap_.num_experts; expert += label_every) {
    char label[16];
    std::snprintf(label, sizeof(label), "%d", expert);
    draw->AddText(ImVec2(grid.cell_x(expert) + 2, grid.top - 16), IM_COL32(220, 220, 220, 255),
                  label);
  }
  // Outline the layer/expert a finding pointed at.
  layout_probe().focus_layer = state.focus_layer;
  layout_probe().focus_expert = state.focus_expert;
  if (state.focus_layer >= 0) {
    auto layer_row = std::find(heatmap_.layer_ids.begin(), heatmap_.layer_ids.end(),
                               static_cast<uint32_t>(state.focus_layer));
    if (layer_row != heatmap_.layer_ids.end()) {
      int row = static_cast<int>(layer_row - heatmap_.layer_ids.begin());
      float x0 = state.focus_expert >= 0 ? grid.cell_x(state.focus_expert) : grid.left;
      float x1 = state.focus_expert >= 0 ? x0 + grid.cell_width : grid.cell_x(heatmap_.num_experts);
      draw->AddRect(ImVec2(x0 - 2, grid.cell_y(row) - 2),
                    ImVec2(x1 + 1, grid.cell_y(row) + grid.cell_height + 1),
                    IM_COL32(80, 220, 255, 255), 0.0f, 0, 2.5f);
    }
  }
  float legend_x = grid.cell_x(heatmap_.num_experts) + 16.0f;
  draw_colour_legend(
      draw, ImVec2(legend_x, grid.top),
      ImVec2(16.0f, std::min(grid.cell_height * static_cast<float>(heatmap_.num_layers()), 200.0f)),
      heatmap_.max_tokens, "tok");
  if (hovering) {
    const HeatmapCell cell = heatmap_cell(heatmap_, hover_row, hover_column);
    ImGui::BeginTooltip();
    ImGui::Text("layer %u, expert %d", cell.layer, cell.expert);
    ImGui::Text("%.0f tokens (%.1f%% of the layer, %.2fx the mean)", cell.tokens,
                100.0 * cell.share, cell.over_mean);
    if (cell.has_prediction) {
      ImGui::Text("predicted %.0f tokens", cell.predicted);
    } else {
      ImGui::TextDisabled("no predicted load recorded");
    }
    ImGui::EndTooltip();
  }
  ImGui::Dummy(
      ImVec2(available.x, std::max(grid.cell_y(heatmap_.num_layers()) - origin.y, 220.0f) + 8.0f));

  // Imbalance over steps: one line per layer, rebalancing decisions as vertical markers.
  ImGui::Text("Imbalance (max / mean tokens per expert) per layer over steps");
  ImVec2 plot_origin = ImGui::GetCursorScreenPos();
  ImVec2 plot_size(ImGui::GetContentRegionAvail().x - 120.0f,
                   std::max(ImGui::GetContentRegionAvail().y - 8.0f, 60.0f));
  draw->AddRectFilled(plot_origin, ImVec2(plot_origin.x + plot_size.x, plot_origin.y + plot_size.y),
                      IM_COL32(26, 28, 32, 255));
  const auto& steps = imbalance_.steps;
  layout_probe().imbalance_plot_top = plot_origin.y;
  layout_probe().imbalance_plot_bottom = plot_origin.y + plot_size.y;
  layout_probe().rebalance_markers.clear();
  if (steps.size() >= 1) {
    double y_max = std::max(imbalance_.max_value * 1.1, 1.5);
    double step_min = static_cast<double>(steps.front()),
           step_max = static_cast<double>(steps.back());
    double step_span = std::max(step_max - step_min, 1.0);
    auto x_of = [&](double step) {
      return plot_origin.x + 40.0f +
             static_cast<float>((step - step_min) / step_span) * (plot_size.x - 50.0f);
    };
    auto y_of = [&](double value) {
      return plot_origin.y + plot_size.y - 16.0f -
             static_cast<float>((value - 1.0) / (y_max - 1.0)) * (plot_size.y - 24.0f);
    };
    for (double tick : {1.0, 0.5 * (1.0 + y_max), y_max}) {
      char label[16];
      std::snprintf(label, sizeof(label), "%.2f", tick);
      draw->AddText(ImVec2(plot_origin.x + 2, y_of(tick) - 7), IM_COL32(170, 170, 170, 255), label);
      draw->AddLine(ImVec2(plot_origin.x + 40, y_of(tick)),
                    ImVec2(plot_origin.x + plot_size.x, y_of(tick)), IM_COL32(60, 60, 60, 255));
    }
    for (const auto& rebalance : trace.model.rebalances) {
      float x = x_of(static_cast<double>(rebalance.step));
      layout_probe().rebalance_markers.push_back({x, rebalance.applied});
      draw->AddLine(ImVec2(x, plot_origin.y), ImVec2(x, plot_origin.y + plot_size.y - 16),
                    rebalance.applied ? IM_COL32(90, 230, 120, 200) : IM_COL32(150, 150, 150, 160),
                    1.5f);
      draw->AddText(ImVec2(x + 4, plot_origin.y + 2),
                    rebalance.applied ? IM_COL32(90, 230, 120, 255) : IM_COL32(150, 150, 150, 255),
                    rebalance.applied ? "rebalanced" : "rebalance skipped");
      ImVec2 mouse_now = ImGui::GetIO().MousePos;
      if (std::fabs(mouse_now.x - x) < 3 && mouse_now.y > plot_origin.y &&
          mouse_now.y < plot_origin.y + plot_size.y) {
        ImGui::SetTooltip(
            "rebalance at step %" PRId64 ", layer %u%s: imbalance %.2f -> %.2f, %s moved",
            rebalance.step, rebalance.layer, rebalance.applied ? "" : " (not applied)",
            rebalance.imbalance_before, rebalance.imbalance_after,
            format_bytes(static_cast<double>(rebalance.bytes_moved)).c_str());
      }
    }
    for (size_t row = 0; row < imbalance_.per_layer.size(); ++row) {
      ImU32 colour = layer_colour(row, imbalance_.per_layer.size());
      const auto& values = imbalance_.per_layer[row];
      for (size_t i = 0; i + 1 < values.size(); ++i) {
        if (std::isnan(values[i]) || std::isnan(values[i + 1])) continue;
        draw->AddLine(ImVec2(x_of(static_cast<double>(steps[i])), y_of(values[i])),
                      ImVec2(x_of(static_cast<double>(steps[i + 1])), y_of(values[i + 1])), colour,
                      1.5f);
      }
      char label[24];
      std::snprintf(label, sizeof(label), "layer %u", imbalance_.layer_ids[row]);
      draw->AddText(
          ImVec2(plot_origin.x + plot_size.x + 8, plot_origin.y + 14.0f * static_cast<float>(row)),
          colour, label);
    }
    char first[24], last[24];
    std::snprintf(first, sizeof(first), "step %" PRId64, steps.front());
    std::snprintf(last, sizeof(last), "step %" PRId64, steps.back());
    draw->AddText(ImVec2(plot_origin.x + 40, plot_origin.y + plot_size.y - 15),
                  IM_COL32(170, 170, 170, 255), first);
    draw->AddText(ImVec2(plot_origin.x + plot_size.x - 70, plot_origin.y + plot_size.y - 15),
                  IM_COL32(170, 170, 170, 255), last);
  }
  ImGui::Dummy(plot_size);
}

}  // namespace moescope::viewer
