#include "screenshot_writer.h"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "moescope/analysis/json_fields.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>

namespace moescope::viewer {

MOESCOPE_JSON_FIELDS(LayoutProbe::ShownFinding, kind, severity, evidence, est_ms_per_step)
MOESCOPE_JSON_FIELDS(LayoutProbe::ShownSummary, drawn, top, bottom, bar, bar_ends, breakdown,
                     chain_ids, chain_kinds, chain_ms, hottest, chain_buttons, hottest_button,
                     what_happened)

bool write_png_bottom_up(const std::string& path, int width, int height,
                         const std::vector<uint8_t>& rgba_bottom_up, std::string& error) {
  size_t row_bytes = static_cast<size_t>(width) * 4;
  std::vector<uint8_t> top_down(rgba_bottom_up.size());
  for (int y = 0; y < height; ++y) {
    std::memcpy(top_down.data() + static_cast<size_t>(y) * row_bytes,
                rgba_bottom_up.data() + static_cast<size_t>(height - 1 - y) * row_bytes, row_bytes);
  }
  // The framebuffer is opaque; drop alpha so the PNG is RGB and smaller.
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0, n = static_cast<size_t>(width) * height; i < n; ++i) {
    std::memcpy(&rgb[i * 3], &top_down[i * 4], 3);
  }
  if (!stbi_write_png(path.c_str(), width, height, 3, rgb.data(), width * 3)) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

namespace {

nlohmann::json grid_json(const GridLayout& grid) {
  return {{"left", grid.left},
          {"top", grid.top},
          {"cell_width", grid.cell_width},
          {"cell_height", grid.cell_height},
          {"rows", grid.rows},
          {"columns", grid.columns}};
}

}  // namespace

bool write_layout_probe(const std::string& path, const LayoutProbe& probe, std::string& error) {
  nlohmann::json json = {{"expert_heatmap", grid_json(probe.expert_heatmap)},
                         {"comm_matrix", grid_json(probe.comm_matrix)},
                         {"memory_peak_x", probe.memory_peak_x},
                         {"memory_plot_top", probe.memory_plot_top},
                         {"memory_plot_bottom", probe.memory_plot_bottom},
                         {"report_rows", probe.report_rows},
                         {"root_cause", probe.root_cause},
                         {"files", probe.files},
                         {"browser_open", probe.browser_open},
                         {"browser_traces", probe.browser_traces},
                         {"browser_checkboxes", probe.browser_checkboxes},
                         {"browser_open_button", probe.browser_open_button},
                         {"ranks", probe.ranks},
                         {"timeline_start_ns", probe.timeline_start_ns},
                         {"timeline_end_ns", probe.timeline_end_ns},
                         {"timeline_area_x", probe.timeline_area_x},
                         {"timeline_area_y", probe.timeline_area_y},
                         {"selected_track", probe.selected_track},
                         {"selected_lane", probe.selected_lane},
                         {"timeline_width", probe.timeline_width},
                         {"collapsed_tracks", probe.collapsed_tracks},
                         {"wait_shades", probe.wait_shades},
                         {"waits_at_end", probe.waits_at_end},
                         {"selected_slot", probe.selected_slot},
                         {"focus_layer", probe.focus_layer},
                         {"focus_expert", probe.focus_expert},
                         {"stats_rows", probe.stats_rows},
                         {"step_ruler_y", probe.step_ruler_y},
                         {"imbalance_plot_top", probe.imbalance_plot_top},
                         {"imbalance_plot_bottom", probe.imbalance_plot_bottom},
                         {"rebalance_markers", probe.rebalance_markers},
                         {"step_first", probe.step_first},
                         {"step_last", probe.step_last}};
  nlohmann::json compare_heatmaps = nlohmann::json::array();
  for (const GridLayout& grid : probe.compare_heatmaps) compare_heatmaps.push_back(grid_json(grid));
  json["compare_heatmaps"] = compare_heatmaps;
  json["compare_chart"] = probe.compare_chart;
  json["overview"] = {{"heatmap", grid_json(probe.overview_heatmap)},
                      {"ranks", probe.overview_ranks},
                      {"column_steps", probe.overview_column_steps},
                      {"hosts", probe.overview_hosts},
                      {"headlines", probe.overview_headlines}};
  json["shown"] = {{"heatmap_layers", probe.heatmap_layers},
                   {"heatmap_tokens", probe.heatmap_tokens},
                   {"imbalance_steps", probe.imbalance_steps},
                   {"imbalance_values", probe.imbalance_values},
                   {"comm_bytes", probe.comm_bytes},
                   {"comm_ops_by_rank", probe.comm_ops_by_rank},
                   {"comm_sent_bytes", probe.comm_sent_bytes},
                   {"comm_busy_ns", probe.comm_busy_ns},
                   {"memory_rank", probe.memory_rank},
                   {"memory_peak_bytes", probe.memory_peak_bytes},
                   {"memory_peak_by_category", probe.memory_peak_by_category},
                   {"memory_live_at_peak", probe.memory_live_at_peak},
                   {"findings", probe.findings},
                   {"compare_layers", probe.compare_layers},
                   {"compare_delta", probe.compare_delta},
                   {"compare_base_step_ms", probe.compare_base_step_ms},
                   {"compare_next_step_ms", probe.compare_next_step_ms}};
  json["shown"]["summary"] = probe.summary;
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace moescope::viewer
