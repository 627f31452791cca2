// The bounded MoE health metric set, one value per series and training step: what `moescope
// metrics` writes post hoc (JSONL, TensorBoard) and what the zero-code capture writes live into
// the program's own TensorBoard / W&B run (profiler/python/moescope/live_metrics.py follows the
// same names and formulas; a test compares the two). docs/metrics.md lists every series.
//
// Names: "moescope/layer<L>/<metric>" per MoE layer, "moescope/<metric>" across layers and ranks,
// "moescope/layer<L>/expert<E>/share" only with per_expert_shares. The bound:
//   series <= kMaxSeriesPerLayer * layers + kMaxGlobalSeries            (default)
//           + sum over layers of num_experts                          (per_expert_shares)
// so a 48-layer x 128-expert model has at most 500 series by default (not 6,144).
//
// Per layer and step, over tokens per expert after expert_load_analysis.h's scope choice:
//   max_over_mean, min_over_mean, cv, effective_experts   statistics.h
//   dead_experts   experts with no token this step
//   hot_experts    experts with a share > kHotShareFactor / num_experts
//   tokens         tokens routed (sum over experts)
//   dropped_tokens only in runs that recorded a dropped token anywhere
//   rank_max_over_mean  expert parallelism: rows per rank max/mean (RECEIVED samples, >= 2 ranks)
// Across layers (the step's layers): max_over_mean/{p50,p90,p99,max}, cv/max, dead_experts and
// tokens (sums), dropped_tokens (as above). Per step across ranks (time_breakdown.h):
//   step_time_ms/{mean,max}, exposed_comm_ms (mean), exposed_comm_share (of mean step time),
//   straggler_excess_ms (statistics.h straggler_excess of the busiest rank's busy time, >= 2
//   ranks), slowest_rank, peak_memory_bytes (the largest use on any rank during the step, when
//   memory was recorded).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

inline constexpr size_t kMaxSeriesPerLayer = 10;
inline constexpr size_t kMaxGlobalSeries = 20;

struct MetricOptions {
  bool per_expert_shares = false;  // `--metrics-detail`: one share series per (layer, expert)
};

struct MetricValue {
  std::string name;
  double value = 0;
};

// Every series' value at one training step, in a fixed order (layers ascending, then global).
struct StepMetrics {
  int64_t step = 0;
  std::vector<MetricValue> values;
};

// One row of the catalogue (docs/metrics.md, `moescope metrics --list`).
struct MetricDefinition {
  const char* name;  // "layer<L>/..." rows repeat per layer
  const char* unit;
  const char* meaning;
};
std::span<const MetricDefinition> metric_catalogue();

// "moescope/layer<layer>/<metric>" and "moescope/<metric>".
std::string layer_metric_name(uint32_t layer, std::string_view metric);
std::string global_metric_name(std::string_view metric);

// The documented bound for a model of these layers (num_experts per layer).
size_t metric_series_bound(std::span<const uint32_t> experts_per_layer,
                           const MetricOptions& options = {});

// Per-layer values of one step from tokens per expert [num_experts] (appended to `out` under
// layer_metric_name(layer, ...)); `dropped` < 0 leaves dropped_tokens out.
void append_layer_metrics(uint32_t layer, std::span<const double> tokens, double dropped,
                          const MetricOptions& options, std::vector<MetricValue>& out);

// Every step of the run that has expert load or step times (step >= 0), ascending.
std::vector<StepMetrics> compute_step_metrics(const TraceModel& model,
                                              const MetricOptions& options = {});

// Distinct series names over all steps.
size_t count_series(const std::vector<StepMetrics>& steps);

}  // namespace moescope::analysis
