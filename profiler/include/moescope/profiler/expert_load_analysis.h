// Expert load per MoE layer, from the expert-load samples.
//
// Per (step, layer) the load vector is the GLOBAL-scope sample when one was recorded, else the
// sum of the LOCAL samples of every rank. Over the steps of a layer:
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

#include "moescope/profiler/trace_model.h"

namespace moescope::analysis {

inline constexpr double kHotShareFactor = 2.0;

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
};

struct ExpertLoadAnalysis {
  std::vector<LayerLoad> layers;  // sorted by layer
  Percentiles max_over_mean;      // across layers
  Percentiles cv;
  RebalanceSummary rebalances;
  bool empty() const { return layers.empty(); }
};

ExpertLoadAnalysis analyze_expert_load(const TraceModel& model);

// Per (layer, expert) tokens summed over the steps in [first_step, last_step] (all ranks):
// [num_layers][num_experts], for heatmaps. Layers without samples are empty rows.
std::vector<std::vector<double>> expert_load_matrix(const TraceModel& model, int64_t first_step,
                                                    int64_t last_step, int32_t rank = -1);

Percentiles percentiles_of(std::vector<double> values);

}  // namespace moescope::analysis
