// The panels besides the timeline: expert load, communication, memory, report, statistics.
// Each draws from LoadedTrace and the shared ViewerState; aggregates are recomputed only when
// the step range or rank changes.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/viewer/computed_for.h"
#include "moescope/viewer/loaded_trace.h"
#include "viewer_state.h"

namespace moescope::viewer {

class ExpertsPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  ComputedFor<StepRankFilter> heatmap_for_;
  analysis::ExpertLoadMatrix heatmap_;
  ComputedFor<int32_t> imbalance_for_;  // every step: only the rank narrows the plot
  ImbalanceSeries imbalance_;
};

class CommPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  ComputedFor<StepRankFilter> comm_for_;
  analysis::CommAnalysis comm_;
  int matrix_index_ = 0;  // the communicator shown (the one with the most bytes by default)
};

class MemoryPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  ComputedFor<int> peak_for_;  // the process index
  analysis::RankMemory peak_;
};

class ReportPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);
};

class StatsPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  ComputedFor<> order_for_;
  std::vector<size_t> kernel_order_, range_order_;
};

// Selects a finding's place: step range, rank, layer/expert in the heatmap, time window in the
// timeline (applied by the timeline on its next frame).
void focus_finding(const LoadedTrace& trace, ViewerState& state, int finding_index);

}  // namespace moescope::viewer
