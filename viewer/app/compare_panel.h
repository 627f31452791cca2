// The comparison tab (`moescope view BASE... --against NEW...`): what `moescope diff` says in
// one line, the expert-load heatmaps of both runs side by side with their difference, and the
// per-step time of both runs on one chart.
#pragma once

#include "moescope/viewer/loaded_trace.h"
#include "moescope/viewer/run_comparison.h"

namespace moescope::viewer {

class ComparePanel {
 public:
  // `comparison` was computed from `base` and `next` (compare_runs).
  void draw(const LoadedTrace& base, const LoadedTrace& next, const RunComparison& comparison);

 private:
  void draw_heatmaps(const RunComparison& comparison, float height);
  void draw_step_chart(const RunComparison& comparison);
};

}  // namespace moescope::viewer
