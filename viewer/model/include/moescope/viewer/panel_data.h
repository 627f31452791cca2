// Layouts of what the MoE panels show: the numbers come from the analysis library (expert
// load, all-to-all matrices, memory at the peak, findings: the report's numbers); here they are
// arranged for drawing, plus the kernel/range statistics tables. No ImGui here, so tests check
// the numbers directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::viewer {

// The panels' step range and rank filter: the analysis library's, so a panel asks the analysis
// for exactly what it shows.
using analysis::StepRankFilter;

// What the heatmap's tooltip shows for the cell under the mouse.
struct HeatmapCell {
  uint32_t layer = 0;  // layer number (not the row)
  int expert = 0;
  double tokens = 0.0;
  double share = 0.0;      // of the layer's tokens
  double over_mean = 0.0;  // tokens / the layer's mean per expert
  bool has_prediction = false;
  double predicted = 0.0;  // the balancer's predicted load, when recorded
};
HeatmapCell heatmap_cell(const analysis::ExpertLoadMatrix& heatmap, int row, int expert);

// The analysis's max/mean of tokens per expert per step (LayerLoad::max_over_mean_by_step)
// laid out on one step axis for the imbalance plot.
struct ImbalanceSeries {
  std::vector<int64_t> steps;  // ascending, every step of any layer
  std::vector<uint32_t> layer_ids;
  std::vector<std::vector<double>> per_layer;  // [layer row][step index]; NaN when missing
  double max_value = 0.0;
};
ImbalanceSeries imbalance_series(const analysis::ExpertLoadAnalysis& load);

// Duration statistics of events grouped by name.
struct NameStatistics {
  analysis::StringId name = 0;
  uint64_t count = 0;
  double total_ns = 0, mean_ns = 0, p50_ns = 0, p99_ns = 0, max_ns = 0;
};
std::vector<NameStatistics> kernel_statistics(const analysis::TraceModel& model);
std::vector<NameStatistics> range_statistics(const analysis::TraceModel& model);

// The statistics tables' columns, in display order; clicking a header sorts by it.
enum class StatisticsColumn : int { kName = 0, kCount, kTotal, kMean, kP50, kP99 };
// Row order of `rows` sorted by `column` (stable; names compare as text).
std::vector<size_t> sorted_statistics(const analysis::TraceModel& model,
                                      const std::vector<NameStatistics>& rows,
                                      StatisticsColumn column, bool ascending);

}  // namespace moescope::viewer
