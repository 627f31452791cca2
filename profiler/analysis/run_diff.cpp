// Pairs the per-step numbers of two runs and decides what changed (definitions in run_diff.h).
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "moescope/analysis/collective_wait.h"
#include "moescope/analysis/comm_analysis.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/finding_links.h"
#include "moescope/analysis/findings.h"
#include "moescope/analysis/memory_analysis.h"
#include "moescope/analysis/span_time.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/time_breakdown.h"

namespace moescope::analysis {
namespace {

// A per-step number of one run, before pairing.
struct Metric {
  std::string section, name, unit;
  bool is_time = false;
  bool absent_is_zero = false;  // a run without it spent 0 there (spans, collectives)
  double total = 0;             // ranks the span rows
  double order = 0;             // position inside its section
  StepSeries series;
};

using MetricKey = std::pair<std::string, std::string>;  // (section, name)

struct RunMetrics {
  std::map<MetricKey, Metric> metrics;
  std::vector<int64_t> kept_steps;
  std::map<uint32_t, LayerLoad> layers;
  std::vector<Finding> findings;
  const TraceModel* model = nullptr;
};

// Keeps the entries of `steps` / `values` whose step is in `kept` (both sorted).
StepSeries kept_series(const std::vector<int64_t>& steps, const std::vector<double>& values,
                       const std::vector<int64_t>& kept) {
  StepSeries series;
  for (size_t i = 0; i < steps.size() && i < values.size(); ++i) {
    if (std::binary_search(kept.begin(), kept.end(), steps[i])) {
      series.steps.push_back(steps[i]);
      series.values.push_back(values[i]);
    }
  }
  return series;
}

class MetricCollector {
 public:
  MetricCollector(const TraceModel& model, const std::vector<RankFacts>* facts,
                  const DiffOptions& options, RunSide& side)
      : model_(model), facts_(facts), side_(side) {
    run_.model = &model;
    run_.kept_steps = steps_after_warmup(model, options.skip_steps);
  }

  RunMetrics collect() {
    const TimeBreakdown breakdown =
        facts_ ? time_breakdown_of_facts(*facts_) : compute_time_breakdown(model_);
    const ExpertLoadAnalysis experts = analyze_expert_load(model_);
    step_parts(breakdown);
    rank_excess(breakdown);
    spans();
    collectives();
    layers(experts);
    if (facts_) {  // what the summaries hold of the events (report.cpp does the same)
      std::vector<RankMemory> memory;
      std::vector<double> expert_ms;
      for (const RankFacts& rank : *facts_) {
        memory.push_back(rank.memory);
        expert_ms.push_back(rank.expert_ms_per_step);
      }
      run_.findings = find_bottlenecks(model_, breakdown, experts, memory, {}, &expert_ms);
    } else {
      run_.findings = find_bottlenecks(model_, breakdown, experts, analyze_memory(model_));
    }
    link_findings(model_, breakdown, analyze_collective_waits(model_), run_.findings);
    side_.ranks = model_.processes.size();
    side_.steps = run_.kept_steps.size();
    side_.step_source = step_source_name(model_.step_source);
    return std::move(run_);
  }

 private:
  Metric& add(const std::string& section, const std::string& name, const char* unit, bool is_time,
              const std::vector<int64_t>& steps, const std::vector<double>& values,
              bool absent_is_zero = false) {
    Metric& metric = run_.metrics[{section, name}];
    metric.section = section;
    metric.name = name;
    metric.unit = unit;
    metric.is_time = is_time;
    metric.absent_is_zero = absent_is_zero;
    metric.series = kept_series(steps, values, run_.kept_steps);
    for (double value : metric.series.values) metric.total += value;
    metric.order = double(run_.metrics.size());
    return metric;
  }

  // The breakdown's parts per step, mean over the ranks that have the step.
  void step_parts(const TimeBreakdown& breakdown) {
    static const std::pair<const char*, double StepBreakdown::*> kParts[] = {
        {"step time", &StepBreakdown::step_ms},
        {"compute", &StepBreakdown::compute_ms},
        {"exposed communication", &StepBreakdown::exposed_communication_ms},
        {"overlapped communication", &StepBreakdown::overlapped_communication_ms},
        {"memcpy", &StepBreakdown::memcpy_ms},
        {"idle", &StepBreakdown::idle_ms},
        {"host sync", &StepBreakdown::host_sync_ms},
    };
    const auto by_step = steps_by_number(breakdown);  // once for the seven parts
    for (const auto& [name, part] : kParts) {
      const StepSeries series = mean_over_ranks_by_step(by_step, part);
      add("step", name, "ms", true, series.steps, series.values);
      if (part == &StepBreakdown::step_ms) {
        side_.step_ids = series.steps;
        side_.step_ms = series.values;
        side_.steps_total = series.steps.size();
      }
    }
  }

  // Per rank and step: busy time over the median of the other ranks' busy time.
  void rank_excess(const TimeBreakdown& breakdown) {
    if (breakdown.ranks.size() < 2) return;
    std::map<int64_t, std::map<int32_t, double>> busy;  // step -> rank -> busy ms
    for (const RankBreakdown& rank : breakdown.ranks) {
      for (const StepBreakdown& step : rank.steps) busy[step.step][rank.rank] = step.busy_ms();
    }
    std::map<int32_t, StepSeries> excess;
    for (const auto& [step, ranks] : busy) {
      if (ranks.size() < 2) continue;
      std::vector<double> busy_ms;
      for (const auto& [rank, ms] : ranks) busy_ms.push_back(ms);
      size_t index = 0;
      for (const auto& [rank, ms] : ranks) {
        excess[rank].steps.push_back(step);
        excess[rank].values.push_back(straggler_excess(busy_ms, index++));
      }
    }
    for (const auto& [rank, series] : excess) {
      add("rank", "rank " + std::to_string(rank) + " busy over the others' median", "ms", true,
          series.steps, series.values);
    }
  }

  std::vector<SpanStepTime> span_times() const {
    if (!facts_) return span_time_per_step(model_);
    std::vector<const std::vector<RankSpanTime>*> ranks;
    for (const RankFacts& rank : *facts_) ranks.push_back(&rank.span_time);
    return span_time_of_ranks(model_, ranks);
  }

  void spans() {
    for (const SpanStepTime& span : span_times()) {
      std::string section = "span", name = span.name;
      if (span.domain == kPhaseDomain) {
        section = "phase";
      } else if (span.domain == kModuleDomain) {
        section = "module";
      } else if (!span.domain.empty() && span.domain != "moescope") {
        name = span.domain + ": " + span.name;
      }
      add(section, name, "ms", true, span.steps, span.ms_per_step, /*absent_is_zero=*/true).order =
          -span.total_ms;
    }
  }

  void collectives() {
    for (const CommKindSteps& kind : communication_per_step(model_)) {
      const std::string name = comm_kind_name(kind.kind);
      add("collective", name + " time", "ms", true, kind.steps, kind.ms, true);
      add("collective", name + " bytes", "bytes", false, kind.steps, kind.bytes, true);
      add("collective", name + " ops", "ops", false, kind.steps, kind.ops, true);
    }
    // Inside the collectives: waiting for the last rank vs moving bytes (collective_wait.h).
    for (const CollectiveKindWait& kind : analyze_collective_waits(model_).kinds) {
      const std::string name = comm_kind_name(kind.kind);
      add("collective", name + " wait", "ms", true, kind.steps, kind.wait_ms, true);
      add("collective", name + " transfer", "ms", true, kind.steps, kind.transfer_ms, true);
    }
  }

  void layers(const ExpertLoadAnalysis& experts) {
    for (const LayerLoad& layer : experts.layers) {
      const std::string prefix = "layer " + std::to_string(layer.layer);
      add("layer", prefix + " experts max/mean", "ratio", false, layer.steps,
          layer.max_over_mean_by_step)
          .order = layer.layer * 3.0;
      if (!layer.rank_steps.empty()) {
        add("layer", prefix + " ranks max/mean", "ratio", false, layer.rank_steps,
            layer.rank_max_over_mean_by_step)
            .order = layer.layer * 3.0 + 1;
      }
      run_.layers[layer.layer] = layer;
    }
    std::map<uint32_t, StepSeries> dropped;
    for (const LayerStepLoad& load : layer_step_loads(model_)) {
      dropped[load.layer].steps.push_back(load.step);
      dropped[load.layer].values.push_back(double(load.dropped));
    }
    for (const auto& [layer, series] : dropped) {
      add("layer", "layer " + std::to_string(layer) + " tokens dropped", "tokens", false,
          series.steps, series.values)
          .order = layer * 3.0 + 2;
    }
  }

  const TraceModel& model_;
  const std::vector<RankFacts>* facts_;  // from summaries, else null
  RunSide& side_;
  RunMetrics run_;
};

bool is_step_time(const DiffRow& row) {
  return row.section == "step" && row.name == "step time";
}

// Zeros over the run's kept steps: a span or collective the run never had.
StepSeries zeros(const std::vector<int64_t>& kept) {
  return {kept, std::vector<double>(kept.size(), 0.0)};
}

int section_order(const std::string& section) {
  static const char* const kOrder[] = {"step",       "phase", "module", "span",
                                       "collective", "layer", "rank"};
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    if (section == kOrder[i]) return int(i);
  }
  return int(std::size(kOrder));
}

// The span sections keep their `max_spans` largest names (base + new time).
std::set<MetricKey> kept_span_keys(const RunMetrics& base, const RunMetrics& next,
                                   size_t max_spans) {
  std::map<MetricKey, double> totals;
  for (const RunMetrics* run : {&base, &next}) {
    for (const auto& [key, metric] : run->metrics) {
      if (key.first == "phase" || key.first == "module" || key.first == "span") {
        totals[key] += metric.total;
      }
    }
  }
  std::map<std::string, std::vector<std::pair<double, MetricKey>>> by_section;
  for (const auto& [key, total] : totals) by_section[key.first].push_back({total, key});
  std::set<MetricKey> kept;
  for (auto& [section, entries] : by_section) {
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; i < entries.size() && i < max_spans; ++i) kept.insert(entries[i].second);
  }
  return kept;
}

std::string where_of(const Finding& finding) {
  std::string where;
  if (finding.where.ranks.empty()) {
    where = "all ranks";
  } else {
    for (int32_t rank : finding.where.ranks) {
      where += (where.empty() ? "rank " : ",") + std::to_string(rank);
    }
  }
  if (finding.where.layer >= 0) where += ", layer " + std::to_string(finding.where.layer);
  return where;
}

std::vector<FindingChange> compare_findings(const std::vector<Finding>& base,
                                            const std::vector<Finding>& next) {
  std::map<std::pair<std::string, std::string>, FindingChange> changes;
  // The new run's evidence wins: it is recorded second.
  auto record = [&](const Finding& finding, double FindingChange::*ms,
                    std::string FindingChange::*severity) {
    FindingChange& change = changes[{finding.kind, where_of(finding)}];
    change.kind = finding.kind;
    change.where = where_of(finding);
    change.*ms = finding.est_ms_per_step;
    change.*severity = severity_name(finding.severity);
    change.evidence = finding.evidence;
  };
  for (const Finding& finding : base) {
    record(finding, &FindingChange::base_ms, &FindingChange::base_severity);
  }
  for (const Finding& finding : next) {
    record(finding, &FindingChange::next_ms, &FindingChange::next_severity);
  }
  std::vector<FindingChange> result;
  for (auto& [key, change] : changes) {
    if (change.base_severity.empty()) {
      change.status = "appeared";
    } else if (change.next_severity.empty()) {
      change.status = "disappeared";
    } else {
      // A change of size: severity moved, or the estimate by >= 20% and >= 0.05 ms.
      const double delta = std::abs(change.next_ms - change.base_ms);
      const bool resized = delta >= 0.05 && delta >= 0.2 * std::max(change.base_ms, change.next_ms);
      change.status =
          change.base_severity != change.next_severity || resized ? "changed" : "unchanged";
    }
    result.push_back(std::move(change));
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const FindingChange& a, const FindingChange& b) {
                     return std::abs(a.next_ms - a.base_ms) > std::abs(b.next_ms - b.base_ms);
                   });
  return result;
}

std::vector<ExpertSetChange> compare_expert_sets(const RunMetrics& base, const RunMetrics& next) {
  std::vector<ExpertSetChange> result;
  for (const auto& [layer, base_layer] : base.layers) {
    auto found = next.layers.find(layer);
    if (found == next.layers.end()) continue;
    if (base_layer.hot_experts != found->second.hot_experts) {
      result.push_back({layer, "hot experts", base_layer.hot_experts, found->second.hot_experts});
    }
    if (base_layer.dead_experts != found->second.dead_experts) {
      result.push_back(
          {layer, "dead experts", base_layer.dead_experts, found->second.dead_experts});
    }
  }
  return result;
}

}  // namespace

size_t RunDiff::significant() const {
  size_t count = 0;
  for (const DiffRow& row : rows) count += row.interval.significant ? 1 : 0;
  return count;
}

RunDiff diff_runs(const TraceModel& base_model, const TraceModel& next_model,
                  const DiffOptions& options, const std::vector<RankFacts>* base_facts,
                  const std::vector<RankFacts>* next_facts) {
  RunDiff diff;
  diff.options = options;
  const RunMetrics base = MetricCollector(base_model, base_facts, options, diff.base).collect();
  const RunMetrics next = MetricCollector(next_model, next_facts, options, diff.next).collect();
  const std::set<MetricKey> spans = kept_span_keys(base, next, options.max_spans);
  std::set<MetricKey> keys;
  for (const RunMetrics* run : {&base, &next}) {
    for (const auto& [key, metric] : run->metrics) {
      const bool is_span = key.first == "phase" || key.first == "module" || key.first == "span";
      if (!is_span || spans.count(key)) keys.insert(key);
    }
  }
  std::vector<std::pair<double, DiffRow>> ordered;
  for (const MetricKey& key : keys) {
    auto in_base = base.metrics.find(key), in_next = next.metrics.find(key);
    const Metric& any = in_base != base.metrics.end() ? in_base->second : in_next->second;
    DiffRow row;
    row.section = any.section;
    row.name = any.name;
    row.unit = any.unit;
    row.is_time = any.is_time;
    row.in_base = in_base != base.metrics.end();
    row.in_next = in_next != next.metrics.end();
    row.base_series = row.in_base          ? in_base->second.series
                      : any.absent_is_zero ? zeros(base.kept_steps)
                                           : StepSeries{};
    row.next_series = row.in_next          ? in_next->second.series
                      : any.absent_is_zero ? zeros(next.kept_steps)
                                           : StepSeries{};
    auto all_zero = [](const StepSeries& series) {
      return std::all_of(series.values.begin(), series.values.end(),
                         [](double value) { return value == 0.0; });
    };
    if (all_zero(row.base_series) && all_zero(row.next_series)) continue;  // nothing to compare
    row.base = batch_mean(row.base_series.values, options.max_batches);
    row.next = batch_mean(row.next_series.values, options.max_batches);
    if (is_step_time(row)) row.run_to_run_sd = options.run_to_run_ms;
    ordered.push_back({any.order, std::move(row)});
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(section_order(a.second.section), a.first) <
           std::make_tuple(section_order(b.second.section), b.first);
  });
  for (auto& [order, row] : ordered) diff.rows.push_back(std::move(row));
  for (const DiffRow& row : diff.rows) {
    diff.rows_compared += row.base.known() && row.next.known() ? 1 : 0;
  }
  diff.alpha_per_row = (1.0 - options.confidence) / double(std::max<size_t>(1, diff.rows_compared));
  for (size_t i = 0; i < diff.rows.size(); ++i) {
    DiffRow& row = diff.rows[i];
    row.interval = difference_interval(row.base, row.next, diff.alpha_per_row, row.run_to_run_sd);
    if (row.is_time && row.interval.significant) diff.ranked.push_back(i);
  }
  std::stable_sort(diff.ranked.begin(), diff.ranked.end(), [&](size_t a, size_t b) {
    return std::abs(diff.rows[a].interval.difference) > std::abs(diff.rows[b].interval.difference);
  });
  diff.expert_sets = compare_expert_sets(base, next);
  diff.findings = compare_findings(base.findings, next.findings);
  return diff;
}

SampleMean run_step_time(const TraceModel& model, const DiffOptions& options,
                         const TimeBreakdown* breakdown) {
  const StepSeries all = mean_over_ranks_by_step(
      breakdown ? *breakdown : compute_time_breakdown(model), &StepBreakdown::step_ms);
  const StepSeries kept =
      kept_series(all.steps, all.values, steps_after_warmup(model, options.skip_steps));
  return batch_mean(kept.values, options.max_batches);
}

void check_prediction(RunDiff& diff, const TraceModel& next, PlacementPrediction prediction,
                      const std::vector<RankFacts>* next_facts) {
  PredictionCheck check;
  std::optional<TimeBreakdown> breakdown;
  if (next_facts) breakdown = time_breakdown_of_facts(*next_facts);
  const std::vector<RankMeasurement> measured = measure_rank_load(
      next, prediction.layers, diff.options.skip_steps, breakdown ? &*breakdown : nullptr);
  for (const RankPrediction& rank : prediction.ranks) {
    auto found = std::find_if(measured.begin(), measured.end(),
                              [&](const RankMeasurement& m) { return m.rank == rank.rank; });
    RankMeasurement entry;
    entry.rank = rank.rank;
    entry.rows.assign(prediction.layers.size(), 0.0);
    if (found != measured.end()) entry = *found;
    check.measured.push_back(std::move(entry));
  }
  // The step time alone, at the diff's confidence (no correction: one number is checked).
  for (const DiffRow& row : diff.rows) {
    if (is_step_time(row)) {
      check.measured_interval =
          difference_interval(row.base, row.next, 1.0 - diff.options.confidence, row.run_to_run_sd);
      check.measured_step_change = check.measured_interval.difference;
    }
  }
  check.inside_interval = check.measured_interval.known &&
                          prediction.step_ms_change >= check.measured_interval.low &&
                          prediction.step_ms_change <= check.measured_interval.high;
  check.prediction = std::move(prediction);
  diff.prediction = std::move(check);
}

}  // namespace moescope::analysis
