// What the MoE panels show, aggregated from the trace model for the selected step range and
// rank: the expert-load heatmap, imbalance per step, the all-to-all matrix, memory at the peak,
// and the kernel/range statistics tables. No ImGui here, so tests check the numbers directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/profiler/trace_model.h"

namespace moescope::viewer {

// Inclusive step range and rank filter shared by the panels (-1 = everything).
struct StepRankFilter {
  int64_t step_first = -1;
  int64_t step_last = -1;
  int32_t rank = -1;
  bool has_step(int64_t step) const {
    return (step_first < 0 || step >= step_first) && (step_last < 0 || step <= step_last);
  }
};

// Tokens per [layer, expert] summed over the filter's steps (row-major [num_layers, num_experts]).
// All ranks: the global (all-reduced) samples of one rank when recorded, else the sum of every
// rank's local samples. One rank: its local samples, else its global ones.
struct ExpertHeatmap {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<double> tokens;       // [num_layers, num_experts]
  std::vector<double> predicted;    // [num_layers, num_experts]; empty when never recorded
  std::vector<uint32_t> layer_ids;  // row -> layer number (layers present, ascending)
  double max_tokens = 0.0;
  int64_t num_steps = 0;  // distinct steps aggregated
  double at(int row, int expert) const {
    return tokens[static_cast<size_t>(row) * num_experts + expert];
  }
  double layer_total(int row) const;
};
ExpertHeatmap aggregate_expert_load(const analysis::TraceModel& model,
                                    const StepRankFilter& filter);

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
HeatmapCell heatmap_cell(const ExpertHeatmap& heatmap, int row, int expert);

// max/mean of tokens per expert for each step and layer (same scope choice as the heatmap).
struct ImbalanceSeries {
  std::vector<int64_t> steps;  // ascending
  std::vector<uint32_t> layer_ids;
  std::vector<std::vector<double>> per_layer;  // [layer row][step index]; NaN when missing
  double max_value = 0.0;
};
ImbalanceSeries imbalance_over_steps(const analysis::TraceModel& model, int32_t rank);

// Steps present in the trace (from step intervals, else from expert-load samples), ascending.
std::vector<int64_t> known_steps(const analysis::TraceModel& model);
// Time window of the filter's steps on `process` ([begin, end] of the model when unfiltered or
// when the process has no step intervals).
void step_window(const analysis::TraceModel& model, const analysis::ProcessTrack& process,
                 const StepRankFilter& filter, analysis::TimeNs& begin, analysis::TimeNs& end);

// Bytes each rank sent to each rank in all-to-all operations inside the filter's steps, and
// the achieved bandwidth per sending rank (bytes / time spent in those ops).
struct CommMatrix {
  std::vector<int32_t> ranks;               // row/column -> rank
  std::vector<double> bytes;                // [sender row, receiver column]
  std::vector<double> sent_bytes, busy_ns;  // per sender row
  std::vector<uint64_t> num_ops;            // per sender row
  double max_bytes = 0.0;
  double bandwidth_gbps(size_t row) const {
    return busy_ns[row] > 0 ? sent_bytes[row] / busy_ns[row] : 0.0;  // bytes/ns = GB/s
  }
};
CommMatrix all_to_all_matrix(const analysis::TraceModel& model, const StepRankFilter& filter);

// Memory of one process at its peak: when, how much per category, and the largest live blocks.
struct LiveBlock {
  uint64_t address = 0;
  int64_t bytes = 0;
  uint16_t category = 0;
  analysis::TimeNs allocated_at = 0;
};
struct MemoryPeak {
  analysis::TimeNs time = 0;
  int64_t total = 0;
  int64_t by_category[analysis::kNumMemoryCategories] = {};
  std::vector<LiveBlock> largest_live;  // by size, descending
  size_t num_live = 0;
};
MemoryPeak memory_peak(const analysis::ProcessTrack& process, size_t max_blocks);

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
