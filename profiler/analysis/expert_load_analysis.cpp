// Expert load statistics per layer (definitions in expert_load_analysis.h).
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/rebalance_decision_text.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <span>

namespace moescope::analysis {
namespace {

void add_into(std::vector<double>& sum, std::span<const uint32_t> tokens) {
  if (sum.size() < tokens.size()) sum.resize(tokens.size(), 0.0);
  for (size_t e = 0; e < tokens.size(); ++e) sum[e] += double(tokens[e]);
}

// The samples of one (layer, step) by scope, before the choice.
struct ScopedSums {
  std::vector<double> local, global;
  uint64_t local_dropped = 0, global_dropped = 0;
  bool has_local = false;
  int32_t global_rank = std::numeric_limits<int32_t>::max();  // whose GLOBAL copies are kept
  std::vector<double> predicted;
  int32_t predicted_rank = std::numeric_limits<int32_t>::max();
};

// (layer, step, rank) -> rows that rank's experts computed.
std::map<uint32_t, std::map<int64_t, std::map<int32_t, double>>> received_rows(
    const TraceModel& model, const StepRankFilter& filter) {
  std::map<uint32_t, std::map<int64_t, std::map<int32_t, double>>> rows;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.scope != kExpertsReceived || !filter.has_step(sample.step)) continue;
    double sum = 0;
    for (auto count : model.tokens(sample)) sum += double(count);
    rows[sample.layer][sample.step][sample.rank] += sum;
  }
  return rows;
}

}  // namespace

std::vector<RankStepRows> received_rows_by_rank(const TraceModel& model,
                                                const StepRankFilter& filter) {
  std::vector<RankStepRows> result;
  for (const auto& [layer, steps] : received_rows(model, filter)) {
    for (const auto& [step, ranks] : steps) {
      for (const auto& [rank, rows] : ranks) {
        if (filter.has_rank(rank)) result.push_back({layer, step, rank, rows});
      }
    }
  }
  return result;
}

std::vector<LayerStepLoad> layer_step_loads(const TraceModel& model, const StepRankFilter& filter) {
  std::map<std::pair<uint32_t, int64_t>, ScopedSums> sums;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (!filter.has_step(sample.step) || !filter.has_rank(sample.rank)) continue;
    if (sample.scope == kExpertsLocal) {
      ScopedSums& entry = sums[{sample.layer, sample.step}];
      add_into(entry.local, model.tokens(sample));
      entry.local_dropped += sample.dropped_tokens;
      entry.has_local = true;
    } else if (sample.scope == kExpertsGlobal) {
      ScopedSums& entry = sums[{sample.layer, sample.step}];
      // Every rank records the same all-reduced counts: keep the lowest rank's copy.
      if (sample.rank < entry.global_rank) {
        entry.global.clear();
        entry.global_dropped = 0;
        entry.global_rank = sample.rank;
      }
      if (sample.rank != entry.global_rank) continue;
      add_into(entry.global, model.tokens(sample));
      entry.global_dropped += sample.dropped_tokens;
    }
  }
  for (const ExpertValuesSample& sample : model.expert_values) {
    if (sample.quantity != kQuantityPredictedLoad || !filter.has_rank(sample.rank)) continue;
    auto found = sums.find({sample.layer, sample.step});
    if (found == sums.end() || sample.rank >= found->second.predicted_rank) continue;
    auto values = model.values(sample);
    found->second.predicted.assign(values.begin(), values.end());
    found->second.predicted_rank = sample.rank;
  }
  std::vector<LayerStepLoad> loads;
  loads.reserve(sums.size());
  for (auto& [key, entry] : sums) {
    const bool has_global = entry.global_rank != std::numeric_limits<int32_t>::max();
    const bool use_local = filter.rank >= 0 ? entry.has_local : !has_global;
    LayerStepLoad load;
    load.layer = key.first;
    load.step = key.second;
    load.tokens = std::move(use_local ? entry.local : entry.global);
    load.dropped = use_local ? entry.local_dropped : entry.global_dropped;
    load.predicted = std::move(entry.predicted);
    loads.push_back(std::move(load));
  }
  return loads;
}

Percentiles percentiles_of(std::vector<double> values) {
  Percentiles result;
  if (values.empty()) return result;
  std::sort(values.begin(), values.end());
  result.p50 = percentile_of_sorted(values, 0.5);
  result.p90 = percentile_of_sorted(values, 0.9);
  result.p99 = percentile_of_sorted(values, 0.99);
  result.max = values.back();
  return result;
}

ExpertLoadAnalysis analyze_expert_load(const TraceModel& model, const StepRankFilter& filter) {
  ExpertLoadAnalysis result;
  // layer -> step -> load
  std::map<uint32_t, std::map<int64_t, LayerStepLoad>> layers;
  for (LayerStepLoad& load : layer_step_loads(model, filter)) {
    layers[load.layer][load.step] = std::move(load);
  }
  // Router entropy per layer: first and last step's mean over ranks.
  std::map<uint32_t, std::map<int64_t, std::pair<double, int>>> entropy;
  for (const LayerStatsSample& stats : model.layer_stats) {
    if (!std::isfinite(stats.router_entropy) || !filter.has_step(stats.step) ||
        !filter.has_rank(stats.rank))
      continue;
    auto& entry = entropy[stats.layer][stats.step];
    entry.first += stats.router_entropy;
    entry.second += 1;
  }
  for (auto& [layer_id, steps] : layers) {
    LayerLoad layer;
    layer.layer = layer_id;
    for (const auto& [step, load] : steps) {
      layer.num_experts = std::max<uint32_t>(layer.num_experts, uint32_t(load.tokens.size()));
    }
    const uint32_t experts = layer.num_experts;
    if (experts == 0) continue;
    layer.share.assign(experts, 0.0);
    std::vector<double> expert_total(experts, 0.0);
    double sum_max_over_mean = 0, sum_cv = 0, sum_min = 0, sum_max = 0, sum_std = 0, sum_mean = 0,
           prediction_error = 0;
    for (const auto& [step, load] : steps) {
      std::vector<double> tokens = load.tokens;
      tokens.resize(experts, 0.0);
      const double total = std::accumulate(tokens.begin(), tokens.end(), 0.0);
      const double mean_tokens = mean(tokens);
      const auto [min, max] = std::minmax_element(tokens.begin(), tokens.end());
      layer.steps.push_back(step);
      layer.max_over_mean_by_step.push_back(max_over_mean(tokens));
      sum_max_over_mean += layer.max_over_mean_by_step.back();
      sum_cv += coefficient_of_variation(tokens);
      sum_min += *min, sum_max += *max, sum_std += standard_deviation(tokens);
      sum_mean += mean_tokens;
      for (uint32_t e = 0; e < experts; ++e) {
        expert_total[e] += tokens[e];
        layer.share[e] += share(tokens[e], total);
      }
      layer.total_tokens += static_cast<uint64_t>(total);
      layer.dropped_tokens += load.dropped;
      if (!load.predicted.empty() && mean_tokens > 0) {
        double error = 0;
        for (uint32_t e = 0; e < experts && e < load.predicted.size(); ++e) {
          error += std::abs(double(load.predicted[e]) - tokens[e]);
        }
        prediction_error += error / experts / mean_tokens;
        ++layer.predictions;
      }
    }
    const double n = double(steps.size());
    layer.num_steps = static_cast<uint32_t>(steps.size());
    layer.first_step = steps.begin()->first;
    layer.last_step = steps.rbegin()->first;
    layer.max_over_mean = sum_max_over_mean / n;
    layer.cv = sum_cv / n;
    layer.utilization = layer.max_over_mean > 0 ? 1.0 / layer.max_over_mean : 0.0;
    layer.mean_tokens = sum_mean / n;
    layer.min_tokens = sum_min / n;
    layer.max_tokens = sum_max / n;
    layer.std_tokens = sum_std / n;
    for (uint32_t e = 0; e < experts; ++e) {
      layer.share[e] /= n;
      if (is_hot_share(layer.share[e], experts)) layer.hot_experts.push_back(e);
      if (expert_total[e] == 0) layer.dead_experts.push_back(e);
    }
    const double routed = double(layer.total_tokens) + double(layer.dropped_tokens);
    layer.dropped_fraction = routed > 0 ? double(layer.dropped_tokens) / routed : 0.0;
    layer.effective_experts_first = effective_count(steps.begin()->second.tokens);
    layer.effective_experts_last = effective_count(steps.rbegin()->second.tokens);
    layer.prediction_error = layer.predictions ? prediction_error / layer.predictions : NAN;
    layer.router_entropy_first = layer.router_entropy_last = NAN;
    auto stats = entropy.find(layer_id);
    if (stats != entropy.end() && !stats->second.empty()) {
      const auto& first = stats->second.begin()->second;
      const auto& last = stats->second.rbegin()->second;
      layer.router_entropy_first = first.first / first.second;
      layer.router_entropy_last = last.first / last.second;
    }
    result.layers.push_back(std::move(layer));
  }
  const auto received = received_rows(model, filter);
  for (LayerLoad& layer : result.layers) {
    const auto found = received.find(layer.layer);
    if (found == received.end()) continue;
    double sum = 0;
    uint32_t steps = 0;
    for (const auto& [step, per_rank] : found->second) {
      if (per_rank.size() < 2) continue;
      double total = 0, max = 0;
      for (const auto& [rank, rows] : per_rank) total += rows, max = std::max(max, rows);
      const double mean = total / double(per_rank.size());
      if (mean <= 0) continue;
      sum += max / mean;
      layer.rank_max_over_mean_by_step.push_back(max / mean);
      layer.rank_steps.push_back(step);
      ++steps;
      layer.ranks = std::max<uint32_t>(layer.ranks, uint32_t(per_rank.size()));
    }
    layer.rank_max_over_mean = steps ? sum / steps : 0.0;
  }
  std::vector<double> max_over_mean, cv;
  for (const LayerLoad& layer : result.layers) {
    max_over_mean.push_back(layer.max_over_mean);
    cv.push_back(layer.cv);
  }
  result.max_over_mean = percentiles_of(max_over_mean);
  result.cv = percentiles_of(cv);
  RebalanceSummary& rebalance = result.rebalances;
  for (const RebalanceDecision& decision : model.rebalances) {
    if (!filter.has_step(decision.step) || !filter.has_rank(decision.rank)) continue;
    ++rebalance.decisions;
    rebalance.applied += decision.applied ? 1 : 0;
    rebalance.mean_imbalance_before += decision.imbalance_before;
    rebalance.mean_imbalance_after += decision.imbalance_after;
    rebalance.bytes_moved += decision.applied ? decision.bytes_moved : 0;
    rebalance.total_duration_ms += double(decision.duration_ns) * 1e-6;
  }
  rebalance.with_costs = decisions_with_costs(model.rebalances, [&](const RebalanceDecision& d) {
    return filter.has_step(d.step) && filter.has_rank(d.rank);
  });
  if (rebalance.decisions) {
    rebalance.mean_imbalance_before /= rebalance.decisions;
    rebalance.mean_imbalance_after /= rebalance.decisions;
  }
  return result;
}

double ExpertLoadMatrix::layer_total(int row) const {
  double total = 0.0;
  for (int e = 0; e < num_experts; ++e) total += at(row, e);
  return total;
}

int ExpertLoadMatrix::row_of(uint32_t layer) const {
  auto found = std::lower_bound(layer_ids.begin(), layer_ids.end(), layer);
  if (found == layer_ids.end() || *found != layer) return -1;
  return static_cast<int>(found - layer_ids.begin());
}

double ExpertLoadMatrix::per_step_at(int row, int expert) const {
  return per_step(at(row, expert), row_steps[static_cast<size_t>(row)]);
}

ExpertLoadMatrix expert_load_matrix(const TraceModel& model, const StepRankFilter& filter) {
  ExpertLoadMatrix matrix;
  const std::vector<LayerStepLoad> loads = layer_step_loads(model, filter);
  std::set<int64_t> steps;
  bool any_prediction = false;
  for (const LayerStepLoad& load : loads) {
    if (matrix.layer_ids.empty() || matrix.layer_ids.back() != load.layer) {
      matrix.layer_ids.push_back(load.layer);  // loads are sorted by layer
    }
    matrix.num_experts = std::max(matrix.num_experts, static_cast<int>(load.tokens.size()));
    steps.insert(load.step);
    any_prediction = any_prediction || !load.predicted.empty();
  }
  matrix.num_steps = static_cast<int64_t>(steps.size());
  std::vector<std::set<int64_t>> steps_of_row(matrix.layer_ids.size());
  for (const LayerStepLoad& load : loads)
    steps_of_row[size_t(matrix.row_of(load.layer))].insert(load.step);
  for (const auto& row_steps : steps_of_row) matrix.row_steps.push_back(int64_t(row_steps.size()));
  const size_t width = static_cast<size_t>(matrix.num_experts);
  matrix.tokens.assign(matrix.layer_ids.size() * width, 0.0);
  if (any_prediction) matrix.predicted.assign(matrix.tokens.size(), 0.0);
  for (const LayerStepLoad& load : loads) {
    const size_t row_start = static_cast<size_t>(matrix.row_of(load.layer)) * width;
    for (size_t e = 0; e < load.tokens.size(); ++e) matrix.tokens[row_start + e] += load.tokens[e];
    for (size_t e = 0; e < load.predicted.size() && e < width; ++e) {
      matrix.predicted[row_start + e] += load.predicted[e];
    }
  }
  for (double value : matrix.tokens) matrix.max_tokens = std::max(matrix.max_tokens, value);
  return matrix;
}

}  // namespace moescope::analysis
