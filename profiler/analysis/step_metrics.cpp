// The bounded MoE health metric set per step (definitions in step_metrics.h).
#include "moescope/analysis/step_metrics.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/statistics.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/visible_range.h"

namespace moescope::analysis {
namespace {

constexpr MetricDefinition kCatalogue[] = {
    {"layer<L>/max_over_mean", "ratio", "busiest expert's tokens / mean tokens per expert"},
    {"layer<L>/min_over_mean", "ratio", "idlest expert's tokens / mean tokens per expert"},
    {"layer<L>/cv", "ratio", "std / mean of tokens per expert"},
    {"layer<L>/effective_experts", "experts", "exp(entropy of the token shares)"},
    {"layer<L>/dead_experts", "experts", "experts that got no token this step"},
    {"layer<L>/hot_experts", "experts", "experts with a share > 2 / num_experts"},
    {"layer<L>/tokens", "tokens", "tokens routed (summed over experts; top-k counts k times)"},
    {"layer<L>/dropped_tokens", "tokens", "tokens dropped by capacity (runs that drop any)"},
    {"layer<L>/rank_max_over_mean", "ratio",
     "expert parallelism: busiest rank's expert rows / mean over ranks"},
    {"max_over_mean/p50", "ratio", "median over the step's layers of max_over_mean"},
    {"max_over_mean/p90", "ratio", "90th percentile over layers"},
    {"max_over_mean/p99", "ratio", "99th percentile over layers"},
    {"max_over_mean/max", "ratio", "worst layer"},
    {"cv/max", "ratio", "worst layer's cv"},
    {"dead_experts", "experts", "dead experts summed over layers"},
    {"tokens", "tokens", "tokens routed summed over layers"},
    {"dropped_tokens", "tokens", "dropped tokens summed over layers (runs that drop any)"},
    {"step_time_ms/mean", "ms", "step time, mean over ranks"},
    {"step_time_ms/max", "ms", "step time of the slowest rank"},
    {"exposed_comm_ms", "ms", "communication not hidden behind compute, mean over ranks"},
    {"exposed_comm_share", "ratio", "exposed_comm_ms / step_time_ms/mean"},
    {"straggler_excess_ms", "ms", "busiest rank's busy time - median of the others' (>= 2 ranks)"},
    {"slowest_rank", "rank", "the rank with the most busy time"},
    {"peak_memory_bytes", "bytes", "largest memory in use on any rank during the step"},
    {"layer<L>/expert<E>/share", "ratio", "--metrics-detail only: expert's share of tokens"},
};

// The largest total in use on `process` during [begin, end] (the value in force at begin
// included); -1 without memory events.
double peak_memory_in(const ProcessTrack& process, TimeNs begin, TimeNs end) {
  const MemoryUsage& usage = process.memory_usage;
  if (usage.times.empty()) return -1;
  IndexRange range = visible_samples(usage.times, begin, end + 1);
  double peak = 0;
  for (size_t i = range.begin; i < range.end && i < usage.total.size(); ++i) {
    if (usage.times[i] <= end) peak = std::max(peak, double(usage.total[i]));
  }
  return peak;
}

// Across-rank time metrics of one step (rank breakdowns that have it).
void append_time_metrics(const TraceModel& model, const std::vector<const StepBreakdown*>& ranks,
                         std::vector<MetricValue>& out) {
  if (ranks.empty()) return;
  double sum_step = 0, max_step = 0, sum_exposed = 0;
  std::vector<double> busy;
  for (const StepBreakdown* rank : ranks) {
    sum_step += rank->step_ms;
    max_step = std::max(max_step, rank->step_ms);
    sum_exposed += rank->exposed_communication_ms;
    busy.push_back(rank->busy_ms());
  }
  const double n = double(ranks.size());
  out.push_back({global_metric_name("step_time_ms/mean"), sum_step / n});
  out.push_back({global_metric_name("step_time_ms/max"), max_step});
  out.push_back({global_metric_name("exposed_comm_ms"), sum_exposed / n});
  out.push_back({global_metric_name("exposed_comm_share"), share(sum_exposed / n, sum_step / n)});
  if (ranks.size() >= 2) {
    const size_t slowest =
        static_cast<size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    out.push_back({global_metric_name("straggler_excess_ms"), straggler_excess(busy, slowest)});
    out.push_back({global_metric_name("slowest_rank"), double(ranks[slowest]->rank)});
  }
  double peak = -1;
  for (const StepBreakdown* rank : ranks) {
    int index = model.process_of_rank(rank->rank);
    if (index >= 0) {
      peak = std::max(peak, peak_memory_in(model.processes[size_t(index)], rank->start, rank->end));
    }
  }
  if (peak >= 0) out.push_back({global_metric_name("peak_memory_bytes"), peak});
}

}  // namespace

std::span<const MetricDefinition> metric_catalogue() {
  return kCatalogue;
}

std::string layer_metric_name(uint32_t layer, std::string_view metric) {
  return "moescope/layer" + std::to_string(layer) + "/" + std::string(metric);
}

std::string global_metric_name(std::string_view metric) {
  return "moescope/" + std::string(metric);
}

size_t metric_series_bound(std::span<const uint32_t> experts_per_layer,
                           const MetricOptions& options) {
  size_t bound = kMaxSeriesPerLayer * experts_per_layer.size() + kMaxGlobalSeries;
  if (options.per_expert_shares) {
    for (uint32_t experts : experts_per_layer) bound += experts;
  }
  return bound;
}

void append_layer_metrics(uint32_t layer, std::span<const double> tokens, double dropped,
                          const MetricOptions& options, std::vector<MetricValue>& out) {
  const double total = std::accumulate(tokens.begin(), tokens.end(), 0.0);
  out.push_back({layer_metric_name(layer, "max_over_mean"), max_over_mean(tokens)});
  out.push_back({layer_metric_name(layer, "min_over_mean"), min_over_mean(tokens)});
  out.push_back({layer_metric_name(layer, "cv"), coefficient_of_variation(tokens)});
  out.push_back({layer_metric_name(layer, "effective_experts"), effective_count(tokens)});
  out.push_back({layer_metric_name(layer, "dead_experts"), double(count_dead_experts(tokens))});
  out.push_back({layer_metric_name(layer, "hot_experts"), double(hot_experts(tokens).size())});
  out.push_back({layer_metric_name(layer, "tokens"), total});
  if (dropped >= 0) out.push_back({layer_metric_name(layer, "dropped_tokens"), dropped});
  if (options.per_expert_shares) {
    for (size_t e = 0; e < tokens.size(); ++e) {
      out.push_back({layer_metric_name(layer, "expert" + std::to_string(e) + "/share"),
                     share(tokens[e], total)});
    }
  }
}

std::vector<StepMetrics> compute_step_metrics(const TraceModel& model,
                                              const MetricOptions& options) {
  std::vector<LayerStepLoad> loads = layer_step_loads(model);
  const bool any_dropped =
      std::any_of(loads.begin(), loads.end(), [](const LayerStepLoad& l) { return l.dropped > 0; });
  // step -> layer -> its load (pointers into `loads`).
  std::map<int64_t, std::map<uint32_t, const LayerStepLoad*>> by_step;
  for (const LayerStepLoad& load : loads) {
    if (load.step >= 0 && !load.tokens.empty()) by_step[load.step][load.layer] = &load;
  }
  // step -> layer -> rank -> rows its experts computed.
  std::map<int64_t, std::map<uint32_t, std::vector<double>>> rank_rows;
  for (const RankStepRows& rows : received_rows_by_rank(model)) {
    if (rows.step >= 0) rank_rows[rows.step][rows.layer].push_back(rows.rows);
  }
  TimeBreakdown breakdown = compute_time_breakdown(model);
  const std::map<int64_t, std::vector<const StepBreakdown*>> times = steps_by_number(breakdown);
  std::set<int64_t> steps;
  for (const auto& [step, layers] : by_step) steps.insert(step);
  for (const auto& [step, ranks] : times) steps.insert(step);

  std::vector<StepMetrics> result;
  for (int64_t step : steps) {
    StepMetrics metrics;
    metrics.step = step;
    std::vector<double> layer_max_over_mean, layer_cv;
    double dead = 0, tokens = 0, dropped = 0;
    auto layers = by_step.find(step);
    if (layers != by_step.end()) {
      for (const auto& [layer, load] : layers->second) {
        const size_t first = metrics.values.size();
        append_layer_metrics(layer, load->tokens, any_dropped ? double(load->dropped) : -1.0,
                             options, metrics.values);
        // append_layer_metrics' fixed order: max_over_mean, min_over_mean, cv,
        // effective_experts, dead_experts, hot_experts, tokens.
        layer_max_over_mean.push_back(metrics.values[first].value);
        layer_cv.push_back(metrics.values[first + 2].value);
        dead += metrics.values[first + 4].value;
        tokens += metrics.values[first + 6].value;
        dropped += double(load->dropped);
        auto rows = rank_rows.find(step);
        if (rows != rank_rows.end()) {
          auto layer_rows = rows->second.find(layer);
          if (layer_rows != rows->second.end() && layer_rows->second.size() >= 2) {
            metrics.values.push_back({layer_metric_name(layer, "rank_max_over_mean"),
                                      max_over_mean(layer_rows->second)});
          }
        }
      }
    }
    if (!layer_max_over_mean.empty()) {
      Percentiles across = percentiles_of(layer_max_over_mean);
      metrics.values.push_back({global_metric_name("max_over_mean/p50"), across.p50});
      metrics.values.push_back({global_metric_name("max_over_mean/p90"), across.p90});
      metrics.values.push_back({global_metric_name("max_over_mean/p99"), across.p99});
      metrics.values.push_back({global_metric_name("max_over_mean/max"), across.max});
      metrics.values.push_back(
          {global_metric_name("cv/max"), *std::max_element(layer_cv.begin(), layer_cv.end())});
      metrics.values.push_back({global_metric_name("dead_experts"), dead});
      metrics.values.push_back({global_metric_name("tokens"), tokens});
      if (any_dropped) metrics.values.push_back({global_metric_name("dropped_tokens"), dropped});
    }
    auto step_times = times.find(step);
    if (step_times != times.end()) append_time_metrics(model, step_times->second, metrics.values);
    result.push_back(std::move(metrics));
  }
  return result;
}

size_t count_series(const std::vector<StepMetrics>& steps) {
  std::set<std::string> names;
  for (const StepMetrics& step : steps) {
    for (const MetricValue& value : step.values) names.insert(value.name);
  }
  return names.size();
}

}  // namespace moescope::analysis
