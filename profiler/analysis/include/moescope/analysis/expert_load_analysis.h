// Expert load per MoE layer, from the expert-load samples. Every expert-load number of the
// report, `moescope plan` and the viewer's panels comes from the functions of this header, so
// they cannot disagree.
//
// Which samples count (the scope choice, per (layer, step), in layer_step_loads):
//   every rank  the GLOBAL samples of the lowest rank that recorded one, else the sum of every
//               rank's LOCAL samples;
//   one rank    that rank's LOCAL samples, else its GLOBAL ones.
// RECEIVED samples never count there (they give rank_max_over_mean). Over the steps of a layer:
//   max_over_mean   mean over steps of max(tokens) / mean(tokens)
//   cv              mean over steps of std(tokens) / mean(tokens)
//   utilization     mean over steps of mean(tokens) / max(tokens) = 1 / max_over_mean: the share
//                   of the experts' capacity doing work when the busiest expert sets the pace
//   hot experts     mean share of tokens > kHotShareFactor / num_experts
//   dead experts    no token in any step
//   effective experts  exp(entropy of the token shares) at the first and the last step
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/statistics.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// Tokens per expert of one MoE layer in one step, after the scope choice above.
struct LayerStepLoad {
  uint32_t layer = 0;
  int64_t step = 0;
  std::vector<double> tokens;  // [num_experts]
  uint64_t dropped = 0;
  // The balancer's forecast for this step, one rank's copy (the filtered rank's, else the
  // lowest rank's): [num_experts], empty when none was recorded.
  std::vector<double> predicted;
};

// Every (layer, step) the filter covers, sorted by (layer, step).
std::vector<LayerStepLoad> layer_step_loads(const TraceModel& model,
                                            const StepRankFilter& filter = {});

struct LayerLoad {
  uint32_t layer = 0;
  uint32_t num_experts = 0;
  uint32_t num_steps = 0;
  int64_t first_step = 0, last_step = 0;
  double mean_tokens = 0;                                 // per expert per step
  double min_tokens = 0, max_tokens = 0, std_tokens = 0;  // per expert, averaged over steps
  double max_over_mean = 0;
  double cv = 0;
  double utilization = 0;
  std::vector<double> share;                  // [num_experts] mean share of tokens per expert
  std::vector<double> max_over_mean_by_step;  // [num_steps]
  std::vector<int64_t> steps;                 // [num_steps]
  std::vector<uint32_t> hot_experts;
  std::vector<uint32_t> dead_experts;
  uint64_t total_tokens = 0;
  uint64_t dropped_tokens = 0;
  double dropped_fraction = 0;  // dropped / (routed + dropped)
  double effective_experts_first = 0, effective_experts_last = 0;
  // Router entropy from the layer statistics (nats; NaN when not recorded).
  double router_entropy_first = 0, router_entropy_last = 0;
  // Balancer predictions: mean absolute error of the predicted load over the actual, relative
  // to the mean load (NaN when no prediction was recorded).
  double prediction_error = 0;
  uint32_t predictions = 0;
  // Expert parallelism: the rows each rank's experts computed (RECEIVED samples), max/mean over
  // the ranks per step, averaged over steps. Every rank waits for the busiest one, so this is
  // the imbalance that costs time (replicas and placement change it, not the router). 0 when
  // fewer than two ranks recorded received rows.
  double rank_max_over_mean = 0;
  uint32_t ranks = 0;
  // The same per step (steps with received rows on at least two ranks).
  std::vector<double> rank_max_over_mean_by_step;
  std::vector<int64_t> rank_steps;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
};

struct RebalanceSummary {
  uint32_t decisions = 0;
  uint32_t applied = 0;
  double mean_imbalance_before = 0, mean_imbalance_after = 0;
  uint64_t bytes_moved = 0;
  double total_duration_ms = 0;
  // One per step and layer, with the numbers they were taken on (rebalance_decision_text.h).
  std::vector<RebalanceDecision> with_costs;
};

struct ExpertLoadAnalysis {
  std::vector<LayerLoad> layers;  // sorted by layer
  Percentiles max_over_mean;      // across layers
  Percentiles cv;
  RebalanceSummary rebalances;
  bool empty() const { return layers.empty(); }
};

// Rows each rank's experts computed in one (layer, step): the sum of its RECEIVED sample.
struct RankStepRows {
  uint32_t layer = 0;
  int64_t step = 0;
  int32_t rank = 0;
  double rows = 0;
};
// Sorted by (layer, step, rank).
std::vector<RankStepRows> received_rows_by_rank(const TraceModel& model,
                                                const StepRankFilter& filter = {});

// The statistics above over the filter's steps and rank (rank_max_over_mean: its steps, every
// rank, since it compares ranks).
ExpertLoadAnalysis analyze_expert_load(const TraceModel& model, const StepRankFilter& filter = {});

// Tokens per (layer, expert) summed over the filter's steps: what the viewer's heatmap shows,
// what `moescope plan` plans from and what the report's JSON lists per layer and rank.
struct ExpertLoadMatrix {
  std::vector<uint32_t> layer_ids;  // row -> layer number (layers present, ascending)
  int num_experts = 0;              // the widest layer's
  std::vector<double> tokens;       // [num_layers, num_experts]
  std::vector<double> predicted;    // [num_layers, num_experts]; empty when never recorded
  int64_t num_steps = 0;            // distinct steps summed
  std::vector<int64_t> row_steps;   // per row: distinct steps of that layer (LayerLoad::num_steps)
  double max_tokens = 0.0;          // largest cell
  int num_layers() const { return static_cast<int>(layer_ids.size()); }
  double at(int row, int expert) const {
    return tokens[static_cast<size_t>(row) * static_cast<size_t>(num_experts) +
                  static_cast<size_t>(expert)];
  }
  double layer_total(int row) const;
  // Tokens per step of one cell: its sum over the steps its layer was recorded in. What
  // `moescope plan` plans from and the viewer's run comparison shows.
  double per_step_at(int row, int expert) const;
  int row_of(uint32_t layer) const;  // -1 when the layer has no samples
};
ExpertLoadMatrix expert_load_matrix(const TraceModel& model, const StepRankFilter& filter = {});

Percentiles percentiles_of(std::vector<double> values);

}  // namespace moescope::analysis
