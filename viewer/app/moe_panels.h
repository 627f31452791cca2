// The panels besides the timeline: expert load, communication, memory, report, statistics.
// Each draws from LoadedTrace and the shared ViewerState; aggregates are recomputed only when
// the step range or rank changes.
#pragma once

#include <vector>

#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/viewer/loaded_trace.h"
#include "viewer_state.h"

namespace moescope::viewer {

class ExpertsPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  const LoadedTrace* cached_for_ = nullptr;
  StepRankFilter cached_filter_{-2, -2, -2};
  analysis::ExpertLoadMatrix heatmap_;
  ImbalanceSeries imbalance_;
};

class CommPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  const LoadedTrace* cached_for_ = nullptr;
  StepRankFilter cached_filter_{-2, -2, -2};
  analysis::CommAnalysis comm_;
  int matrix_index_ = 0;  // the communicator shown (the one with the most bytes by default)
};

class MemoryPanel {
 public:
  void draw(const LoadedTrace& trace, ViewerState& state);

 private:
  const LoadedTrace* cached_for_ = nullptr;
  int cached_process_ = -1;
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
  const LoadedTrace* cached_for_ = nullptr;
  std::vector<size_t> kernel_order_, range_order_;
};

// Selects a finding's place: step range, rank, layer/expert in the heatmap, time window in the
// timeline (applied by the timeline on its next frame).
void focus_finding(const LoadedTrace& trace, ViewerState& state, int finding_index);

}  // namespace moescope::viewer
