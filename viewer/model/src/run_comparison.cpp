#include "moescope/viewer/run_comparison.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace moescope::viewer {
namespace {

// Adds `matrix` per step (ExpertLoadMatrix::per_step_at) into `cells` laid out on
// (layer_ids, num_experts).
void add_per_step(const analysis::ExpertLoadMatrix& matrix, const RunComparison& grid,
                  std::vector<double>& cells) {
  for (int row = 0; row < grid.num_layers(); ++row) {
    const int source = matrix.row_of(grid.layer_ids[static_cast<size_t>(row)]);
    if (source < 0) continue;
    for (int expert = 0; expert < matrix.num_experts && expert < grid.num_experts; ++expert) {
      cells[grid.cell(row, expert)] = matrix.per_step_at(source, expert);
    }
  }
}

}  // namespace

RunComparison compare_runs(const analysis::TraceModel& base, const analysis::TraceModel& next) {
  RunComparison comparison;
  comparison.diff = analysis::diff_runs(base, next);
  const analysis::ExpertLoadMatrix base_tokens = analysis::expert_load_matrix(base);
  const analysis::ExpertLoadMatrix next_tokens = analysis::expert_load_matrix(next);
  std::set<uint32_t> layers(base_tokens.layer_ids.begin(), base_tokens.layer_ids.end());
  layers.insert(next_tokens.layer_ids.begin(), next_tokens.layer_ids.end());
  comparison.layer_ids.assign(layers.begin(), layers.end());
  comparison.num_experts = std::max(base_tokens.num_experts, next_tokens.num_experts);
  const size_t cells =
      comparison.layer_ids.size() * static_cast<size_t>(std::max(comparison.num_experts, 0));
  comparison.base_per_step.assign(cells, 0.0);
  comparison.next_per_step.assign(cells, 0.0);
  add_per_step(base_tokens, comparison, comparison.base_per_step);
  add_per_step(next_tokens, comparison, comparison.next_per_step);
  comparison.delta_per_step.resize(cells);
  for (size_t i = 0; i < cells; ++i) {
    comparison.delta_per_step[i] = comparison.next_per_step[i] - comparison.base_per_step[i];
    comparison.max_per_step = std::max(
        {comparison.max_per_step, comparison.base_per_step[i], comparison.next_per_step[i]});
    comparison.max_abs_delta =
        std::max(comparison.max_abs_delta, std::abs(comparison.delta_per_step[i]));
  }
  return comparison;
}

Rgb delta_colour(double value) {
  if (!std::isfinite(value)) value = 0.0;
  value = std::clamp(value, -1.0, 1.0);
  // Grey (96, 96, 104) at 0; blue (40, 110, 245) at -1; red (240, 70, 50) at +1.
  static constexpr double kZero[3] = {96, 96, 104}, kLow[3] = {40, 110, 245},
                          kHigh[3] = {240, 70, 50};
  const double* end = value < 0 ? kLow : kHigh;
  const double t = std::abs(value);
  auto mix = [&](int channel) {
    return static_cast<uint8_t>(std::lround(kZero[channel] + (end[channel] - kZero[channel]) * t));
  };
  return {mix(0), mix(1), mix(2)};
}

}  // namespace moescope::viewer
