// Two runs in the viewer (`moescope view BASE... --against NEW...`): the expert-load heatmaps of
// both side by side with their difference, and the per-step time of both on one chart. The
// numbers come from the analysis library: analysis::diff_runs (the same comparison as
// `moescope diff`) and analysis::expert_load_matrix of each run; here they are put on one grid.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/trace_model.h"
#include "moescope/viewer/heatmap_layout.h"

namespace moescope::viewer {

struct RunComparison {
  analysis::RunDiff diff;
  // Tokens per expert per step (each run's expert_load_matrix over its number of steps), on
  // the union of both runs' layers: [layer row][expert], row-major.
  std::vector<uint32_t> layer_ids;
  int num_experts = 0;
  std::vector<double> base_per_step, next_per_step, delta_per_step;  // delta = new - base
  double max_per_step = 0;  // the largest cell of either run (one colour scale for both)
  double max_abs_delta = 0;
  int num_layers() const { return static_cast<int>(layer_ids.size()); }
  size_t cell(int row, int expert) const {
    return static_cast<size_t>(row) * static_cast<size_t>(num_experts) +
           static_cast<size_t>(expert);
  }
};

RunComparison compare_runs(const analysis::TraceModel& base, const analysis::TraceModel& next);

// Diverging scale for a difference in [-1, 1]: blue (fewer tokens in the new run) through grey
// (no change) to red (more). Clamped.
Rgb delta_colour(double value);

}  // namespace moescope::viewer
