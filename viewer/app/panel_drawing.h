// Small drawing pieces shared by the MoE panels: byte formatting, the colour legend, and the
// geometry probe that screenshot mode writes next to the PNG so tests find cells by layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <imgui.h>

#include "moescope/viewer/heatmap_layout.h"

namespace moescope::viewer {

// "1.5 GiB", "320 KiB", "12 B".
std::string format_bytes(double bytes);

// A vertical colour bar from heat_colour(0) (bottom) to heat_colour(1) (top) with the values
// at both ends and the middle.
void draw_colour_legend(ImDrawList* draw, ImVec2 top_left, ImVec2 size, double max_value,
                        const char* unit);

// The summary's step-time bar (summary_panel.h): compute, exposed communication, memcpy, idle.
inline constexpr ImU32 kSummaryComputeColour = IM_COL32(70, 130, 220, 255);
inline constexpr ImU32 kSummaryCommunicationColour = IM_COL32(230, 120, 40, 255);
inline constexpr ImU32 kSummaryMemcpyColour = IM_COL32(86, 170, 98, 255);
inline constexpr ImU32 kSummaryIdleColour = IM_COL32(110, 110, 118, 255);

// The timeline's collective ops: the part waiting for the last rank (collective_wait.h) over the
// op's own colour (224, 140, 50).
inline constexpr ImU32 kCollectiveWaitColour = IM_COL32(150, 78, 24, 255);

// Memory categories (moescope_memory_category order): the memory panel's bars and the
// timeline's stacked memory track.
inline constexpr ImU32 kMemoryCategoryColours[] = {
    IM_COL32(150, 150, 150, 255), IM_COL32(90, 150, 230, 255), IM_COL32(170, 110, 220, 255),
    IM_COL32(240, 160, 60, 255),  IM_COL32(90, 200, 120, 255), IM_COL32(200, 90, 90, 255)};

// Geometry actually used by the last drawn frame (screen pixels of the window framebuffer).
struct LayoutProbe {
  GridLayout expert_heatmap;
  GridLayout comm_matrix;
  float memory_peak_x = -1.0f;  // x of the peak marker
  float memory_plot_top = 0, memory_plot_bottom = 0;
  float timeline_area_x = 0, timeline_area_y = 0;     // top-left of the span area
  double timeline_start_ns = 0, timeline_end_ns = 0;  // visible time range
  float timeline_width = 0;                           // px of the span area
  int collapsed_tracks = 0;
  // The collective ops' wait shades drawn: (rank, x where the op starts, x where the wait ends,
  // x where the op ends, y of the lane's middle).
  std::vector<std::vector<float>> wait_shades;
  // The collectives the trace ends inside (a hung job): (rank, x of the entry, x of the
  // recording's end, both unclipped, y of the bar's middle).
  std::vector<std::vector<float>> waits_at_end;
  int selected_lane = -1;
  int selected_track = -1;  // timeline selection
  int64_t selected_slot = -1;
  int focus_layer = -1, focus_expert = -1;  // heatmap outline
  int report_rows = 0;
  std::string root_cause;  // the timeline's first line (analysis::root_cause_line)
  // The summary above the timeline (summary_panel.h): its vertical extent, the step-time bar
  // (x, y, width, height) and where each part ends (compute, exposed comm, memcpy, idle), the
  // numbers it drew (step, compute, exposed comm, memcpy, idle ms), the chain's findings and the
  // hottest cell (layer, expert, share).
  struct ShownSummary {
    bool drawn = false;
    float top = 0, bottom = 0;
    std::vector<float> bar, bar_ends;
    std::vector<double> breakdown;
    std::vector<int32_t> chain_ids;
    std::vector<std::string> chain_kinds;
    std::vector<double> chain_ms;
    std::vector<double> hottest;
    // Centres of the chain's buttons (chain order) and of the hottest cell's.
    std::vector<std::pair<float, float>> chain_buttons;
    std::pair<float, float> hottest_button{0, 0};
    std::string what_happened;  // the headline of a dump or a hung job's traces
  };
  ShownSummary summary;
  int files = 0, ranks = 0;  // of the trace on screen
  // The file browser: whether it is open, the trace files it lists with the centres of their
  // checkboxes, and the centre of its "Open ticked" button.
  bool browser_open = false;
  std::vector<std::string> browser_traces;
  std::vector<std::pair<float, float>> browser_checkboxes;
  std::pair<float, float> browser_open_button{0, 0};
  int stats_rows = 0;
  float step_ruler_y = 0;                   // middle of the timeline's step ruler
  int64_t step_first = -1, step_last = -1;  // the panels' step range (-1 = all steps)
  // The imbalance plot's vertical extent and its rebalancing markers (x, applied).
  float imbalance_plot_top = 0, imbalance_plot_bottom = 0;
  std::vector<std::pair<float, bool>> rebalance_markers;
  // The numbers the panels drew (tests compare them with `moescope report --format json`).
  std::vector<uint32_t> heatmap_layers;
  std::vector<std::vector<double>> heatmap_tokens;  // [layer row][expert]
  std::vector<int64_t> imbalance_steps;
  std::vector<std::vector<double>> imbalance_values;  // [layer row][step index]
  std::vector<std::vector<uint64_t>> comm_bytes;      // [sender][receiver]
  std::vector<uint32_t> comm_ops_by_rank;
  std::vector<uint64_t> comm_sent_bytes;
  std::vector<double> comm_busy_ns;
  int memory_rank = -1;
  int64_t memory_peak_bytes = 0;
  std::vector<int64_t> memory_peak_by_category;
  size_t memory_live_at_peak = 0;
  struct ShownFinding {
    std::string kind, severity, evidence;
    double est_ms_per_step = 0;
  };
  std::vector<ShownFinding> findings;
  // The comparison tab: heatmaps (base, new, new - base), the layers and differences drawn
  // ([layer row][expert] row-major, tokens per step), the step chart's rectangle (x, y, width,
  // height) and the two series it drew.
  std::vector<GridLayout> compare_heatmaps;
  std::vector<uint32_t> compare_layers;
  std::vector<double> compare_delta;
  std::vector<float> compare_chart;
  std::vector<double> compare_base_step_ms, compare_next_step_ms;
  // The job overview: its heatmap (all rows, the first at `top`), the ranks of its rows top to
  // bottom, the first step of each column, the host groups top to bottom and the findings
  // named above it.
  GridLayout overview_heatmap;
  std::vector<int32_t> overview_ranks;
  std::vector<int64_t> overview_column_steps;
  std::vector<std::string> overview_hosts, overview_headlines;
};
LayoutProbe& layout_probe();

}  // namespace moescope::viewer
