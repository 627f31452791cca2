// Expert load statistics per layer (definitions in expert_load_analysis.h).
#include "moescope/profiler/expert_load_analysis.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace moescope::analysis {
namespace {

struct StepLoad {
  std::vector<double> tokens;
  bool from_global = false;
  uint64_t dropped = 0;
  std::vector<double> predicted;
};

double effective_experts(const std::vector<double>& tokens) {
  double total = 0;
  for (double t : tokens) total += t;
  if (total <= 0) return 0;
  double entropy = 0;
  for (double t : tokens) {
    if (t > 0) entropy -= (t / total) * std::log(t / total);
  }
  return std::exp(entropy);
}

// (layer, step) -> load, merging scopes as the header says.
std::map<uint32_t, std::map<int64_t, StepLoad>> collect(const TraceModel& model, int32_t rank) {
  std::map<uint32_t, std::map<int64_t, StepLoad>> layers;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.scope == 2 /*received*/) continue;
    if (rank >= 0 && sample.rank != rank) continue;
    StepLoad& load = layers[sample.layer][sample.step];
    auto tokens = model.tokens(sample);
    const bool global = sample.scope == 1;
    if (global && !load.from_global) {
      load.tokens.assign(tokens.begin(), tokens.end());
      load.from_global = true;
      load.dropped = sample.dropped_tokens;
      continue;
    }
    if (global || load.from_global) continue;  // one global sample per step is enough
    if (load.tokens.size() < tokens.size()) load.tokens.resize(tokens.size(), 0.0);
    for (size_t e = 0; e < tokens.size(); ++e) load.tokens[e] += tokens[e];
    load.dropped += sample.dropped_tokens;
  }
  for (const ExpertValuesSample& sample : model.expert_values) {
    if (sample.quantity != 0 /*predicted load*/) continue;
    if (rank >= 0 && sample.rank != rank) continue;
    auto found = layers.find(sample.layer);
    if (found == layers.end()) continue;
    auto step = found->second.find(sample.step);
    if (step == found->second.end() || !step->second.predicted.empty()) continue;
    auto values = model.values(sample);
    step->second.predicted.assign(values.begin(), values.end());
  }
  return layers;
}

// (layer, step, rank) -> rows that rank's experts computed.
std::map<uint32_t, std::map<int64_t, std::map<int32_t, double>>> received_rows(
    const TraceModel& model) {
  std::map<uint32_t, std::map<int64_t, std::map<int32_t, double>>> rows;
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.scope != 2 /*received*/) continue;
    double sum = 0;
    for (auto count : model.tokens(sample)) sum += double(count);
    rows[sample.layer][sample.step][sample.rank] += sum;
  }
  return rows;
}

}  // namespace

Percentiles percentiles_of(std::vector<double> values) {
  Percentiles result;
  if (values.empty()) return result;
  std::sort(values.begin(), values.end());
  auto at = [&](double q) {
    double position = q * double(values.size() - 1);
    size_t low = static_cast<size_t>(position);
    size_t high = std::min(low + 1, values.size() - 1);
    return values[low] + (values[high] - values[low]) * (position - double(low));
  };
  result.p50 = at(0.5);
  result.p90 = at(0.9);
  result.p99 = at(0.99);
  result.max = values.back();
  return result;
}

ExpertLoadAnalysis analyze_expert_load(const TraceModel& model) {
  ExpertLoadAnalysis result;
  auto layers = collect(model, -1);
  // Router entropy per layer: first and last step's mean over ranks.
  std::map<uint32_t, std::map<int64_t, std::pair<double, int>>> entropy;
  for (const LayerStatsSample& stats : model.layer_stats) {
    if (!std::isfinite(stats.router_entropy)) continue;
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
      double total = 0, max = 0, min = tokens[0];
      for (double t : tokens) total += t, max = std::max(max, t), min = std::min(min, t);
      double mean = total / experts;
      double variance = 0;
      for (double t : tokens) variance += (t - mean) * (t - mean);
      double stddev = std::sqrt(variance / experts);
      double max_over_mean = mean > 0 ? max / mean : 0.0;
      layer.steps.push_back(step);
      layer.max_over_mean_by_step.push_back(max_over_mean);
      sum_max_over_mean += max_over_mean;
      sum_cv += mean > 0 ? stddev / mean : 0.0;
      sum_min += min, sum_max += max, sum_std += stddev, sum_mean += mean;
      for (uint32_t e = 0; e < experts; ++e) {
        expert_total[e] += tokens[e];
        if (total > 0) layer.share[e] += tokens[e] / total;
      }
      layer.total_tokens += static_cast<uint64_t>(total);
      layer.dropped_tokens += load.dropped;
      if (!load.predicted.empty() && mean > 0) {
        double error = 0;
        for (uint32_t e = 0; e < experts && e < load.predicted.size(); ++e) {
          error += std::abs(double(load.predicted[e]) - tokens[e]);
        }
        prediction_error += error / experts / mean;
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
      if (layer.share[e] > kHotShareFactor / experts) layer.hot_experts.push_back(e);
      if (expert_total[e] == 0) layer.dead_experts.push_back(e);
    }
    const double routed = double(layer.total_tokens) + double(layer.dropped_tokens);
    layer.dropped_fraction = routed > 0 ? double(layer.dropped_tokens) / routed : 0.0;
    layer.effective_experts_first = effective_experts(steps.begin()->second.tokens);
    layer.effective_experts_last = effective_experts(steps.rbegin()->second.tokens);
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
  const auto received = received_rows(model);
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
    ++rebalance.decisions;
    rebalance.applied += decision.applied ? 1 : 0;
    rebalance.mean_imbalance_before += decision.imbalance_before;
    rebalance.mean_imbalance_after += decision.imbalance_after;
    rebalance.bytes_moved += decision.applied ? decision.bytes_moved : 0;
    rebalance.total_duration_ms += double(decision.duration_ns) * 1e-6;
  }
  if (rebalance.decisions) {
    rebalance.mean_imbalance_before /= rebalance.decisions;
    rebalance.mean_imbalance_after /= rebalance.decisions;
  }
  return result;
}

std::vector<std::vector<double>> expert_load_matrix(const TraceModel& model, int64_t first_step,
                                                    int64_t last_step, int32_t rank) {
  std::vector<std::vector<double>> matrix;
  for (const auto& [layer, steps] : collect(model, rank)) {
    if (matrix.size() <= layer) matrix.resize(layer + 1);
    auto& row = matrix[layer];
    for (const auto& [step, load] : steps) {
      if (step < first_step || step > last_step) continue;
      if (row.size() < load.tokens.size()) row.resize(load.tokens.size(), 0.0);
      for (size_t e = 0; e < load.tokens.size(); ++e) row[e] += load.tokens[e];
    }
  }
  return matrix;
}

}  // namespace moescope::analysis
