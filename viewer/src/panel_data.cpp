#include "moescope/viewer/panel_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "moescope/recorder.h"

namespace moescope::viewer {

using analysis::ExpertLoadSample;
using analysis::ProcessTrack;
using analysis::TimeNs;
using analysis::TraceModel;

double ExpertHeatmap::layer_total(int row) const {
  double total = 0.0;
  for (int e = 0; e < num_experts; ++e) total += at(row, e);
  return total;
}

namespace {

// The samples the heatmap sums for `rank` (-1 = all ranks), see ExpertHeatmap.
std::vector<const ExpertLoadSample*> chosen_samples(const TraceModel& model, int32_t rank) {
  std::vector<const ExpertLoadSample*> local, global;
  int32_t global_rank = std::numeric_limits<int32_t>::max();
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (sample.scope == MOESCOPE_EXPERTS_GLOBAL) global_rank = std::min(global_rank, sample.rank);
  }
  for (const ExpertLoadSample& sample : model.expert_loads) {
    if (rank >= 0 && sample.rank != rank) continue;
    if (sample.scope == MOESCOPE_EXPERTS_LOCAL) local.push_back(&sample);
    // Every rank records the same all-reduced counts: keep one rank's copy.
    if (sample.scope == MOESCOPE_EXPERTS_GLOBAL && (rank >= 0 || sample.rank == global_rank)) {
      global.push_back(&sample);
    }
  }
  if (rank >= 0) return local.empty() ? global : local;
  return global.empty() ? local : global;
}

}  // namespace

ExpertHeatmap aggregate_expert_load(const TraceModel& model, const StepRankFilter& filter) {
  ExpertHeatmap heatmap;
  std::vector<const ExpertLoadSample*> samples = chosen_samples(model, filter.rank);
  std::set<uint32_t> layers;
  std::set<int64_t> steps;
  for (const ExpertLoadSample* sample : samples) {
    if (!filter.has_step(sample->step)) continue;
    layers.insert(sample->layer);
    steps.insert(sample->step);
    heatmap.num_experts = std::max(heatmap.num_experts, static_cast<int>(sample->num_experts));
  }
  heatmap.layer_ids.assign(layers.begin(), layers.end());
  heatmap.num_layers = static_cast<int>(heatmap.layer_ids.size());
  heatmap.num_steps = static_cast<int64_t>(steps.size());
  heatmap.tokens.assign(static_cast<size_t>(heatmap.num_layers) * heatmap.num_experts, 0.0);
  auto row_of = [&](uint32_t layer) {
    return static_cast<int>(
        std::lower_bound(heatmap.layer_ids.begin(), heatmap.layer_ids.end(), layer) -
        heatmap.layer_ids.begin());
  };
  for (const ExpertLoadSample* sample : samples) {
    if (!filter.has_step(sample->step)) continue;
    auto tokens = model.tokens(*sample);
    size_t row_start = static_cast<size_t>(row_of(sample->layer)) * heatmap.num_experts;
    for (size_t e = 0; e < tokens.size(); ++e) heatmap.tokens[row_start + e] += tokens[e];
  }
  for (double value : heatmap.tokens) heatmap.max_tokens = std::max(heatmap.max_tokens, value);
  // Predicted loads: the balancer's forecasts for the same steps (summed like the tokens).
  for (const auto& values : model.expert_values) {
    if (values.quantity != MOESCOPE_QUANTITY_PREDICTED_LOAD || !filter.has_step(values.step))
      continue;
    if (filter.rank >= 0 && values.rank != filter.rank) continue;
    if (!layers.count(values.layer)) continue;
    if (heatmap.predicted.empty()) heatmap.predicted.assign(heatmap.tokens.size(), 0.0);
    auto data = model.values(values);
    size_t row_start = static_cast<size_t>(row_of(values.layer)) * heatmap.num_experts;
    for (size_t e = 0; e < data.size() && e < static_cast<size_t>(heatmap.num_experts); ++e) {
      heatmap.predicted[row_start + e] += data[e];
    }
  }
  return heatmap;
}

ImbalanceSeries imbalance_over_steps(const TraceModel& model, int32_t rank) {
  ImbalanceSeries series;
  std::vector<const ExpertLoadSample*> samples = chosen_samples(model, rank);
  // (layer, step) -> summed tokens per expert
  std::map<std::pair<uint32_t, int64_t>, std::vector<double>> sums;
  std::set<int64_t> steps;
  std::set<uint32_t> layers;
  for (const ExpertLoadSample* sample : samples) {
    auto& sum = sums[{sample->layer, sample->step}];
    auto tokens = model.tokens(*sample);
    if (sum.size() < tokens.size()) sum.resize(tokens.size(), 0.0);
    for (size_t e = 0; e < tokens.size(); ++e) sum[e] += tokens[e];
    steps.insert(sample->step);
    layers.insert(sample->layer);
  }
  series.steps.assign(steps.begin(), steps.end());
  series.layer_ids.assign(layers.begin(), layers.end());
  series.per_layer.assign(series.layer_ids.size(),
                          std::vector<double>(series.steps.size(), std::nan("")));
  for (const auto& [key, sum] : sums) {
    size_t row = static_cast<size_t>(
        std::lower_bound(series.layer_ids.begin(), series.layer_ids.end(), key.first) -
        series.layer_ids.begin());
    size_t column =
        static_cast<size_t>(std::lower_bound(series.steps.begin(), series.steps.end(), key.second) -
                            series.steps.begin());
    double total = 0.0, max = 0.0;
    for (double value : sum) {
      total += value;
      max = std::max(max, value);
    }
    if (total <= 0.0 || sum.empty()) continue;
    double ratio = max / (total / static_cast<double>(sum.size()));
    series.per_layer[row][column] = ratio;
    series.max_value = std::max(series.max_value, ratio);
  }
  return series;
}

std::vector<int64_t> known_steps(const TraceModel& model) {
  std::set<int64_t> steps;
  for (const ProcessTrack& process : model.processes) {
    for (const auto& step : process.steps) steps.insert(step.step);
  }
  if (steps.empty()) {
    for (const ExpertLoadSample& sample : model.expert_loads) steps.insert(sample.step);
  }
  return {steps.begin(), steps.end()};
}

void step_window(const TraceModel& model, const ProcessTrack& process, const StepRankFilter& filter,
                 TimeNs& begin, TimeNs& end) {
  begin = model.begin;
  end = model.end;
  if (filter.step_first < 0 && filter.step_last < 0) return;
  TimeNs first = std::numeric_limits<TimeNs>::max(), last = std::numeric_limits<TimeNs>::min();
  for (const auto& step : process.steps) {
    if (!filter.has_step(step.step)) continue;
    first = std::min(first, step.start);
    last = std::max(last, step.end);
  }
  if (first <= last) {
    begin = first;
    end = last;
  }
}

CommMatrix all_to_all_matrix(const TraceModel& model, const StepRankFilter& filter) {
  CommMatrix matrix;
  for (const ProcessTrack& process : model.processes) matrix.ranks.push_back(process.rank);
  size_t n = matrix.ranks.size();
  matrix.bytes.assign(n * n, 0.0);
  matrix.sent_bytes.assign(n, 0.0);
  matrix.busy_ns.assign(n, 0.0);
  matrix.num_ops.assign(n, 0);
  for (size_t row = 0; row < n; ++row) {
    const ProcessTrack& process = model.processes[row];
    TimeNs begin, end;
    step_window(model, process, filter, begin, end);
    for (const auto& communicator : process.communicators) {
      for (const auto& op : communicator.ops) {
        if (op.kind != MOESCOPE_COMM_ALL_TO_ALL || op.start < begin || op.start > end) continue;
        auto splits = communicator.splits(op);
        double op_bytes = 0.0;
        // Split i is what this rank sent to rank i of the communicator; communicators of the
        // expert-parallel group span the processes in rank order.
        for (size_t peer = 0; peer < splits.size(); ++peer) {
          int column = model.process_of_rank(static_cast<int32_t>(peer));
          if (column < 0) continue;
          matrix.bytes[row * n + static_cast<size_t>(column)] += static_cast<double>(splits[peer]);
          op_bytes += static_cast<double>(splits[peer]);
        }
        if (splits.empty()) op_bytes = static_cast<double>(op.bytes);
        matrix.sent_bytes[row] += op_bytes;
        if (!(op.flags & analysis::kCommEndUnknown)) {
          matrix.busy_ns[row] += static_cast<double>(std::max<TimeNs>(op.end - op.start, 0));
        }
        matrix.num_ops[row] += 1;
      }
    }
  }
  for (double value : matrix.bytes) matrix.max_bytes = std::max(matrix.max_bytes, value);
  return matrix;
}

MemoryPeak memory_peak(const ProcessTrack& process, size_t max_blocks) {
  MemoryPeak peak;
  const auto& usage = process.memory_usage;
  if (usage.total.empty()) return peak;
  size_t peak_index = static_cast<size_t>(std::max_element(usage.total.begin(), usage.total.end()) -
                                          usage.total.begin());
  peak.time = usage.times[peak_index];
  peak.total = usage.total[peak_index];
  for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
    if (peak_index < usage.by_category[c].size())
      peak.by_category[c] = usage.by_category[c][peak_index];
  }
  // Replay the events up to the peak (usage has one entry per event) to know what was live.
  std::unordered_map<uint64_t, LiveBlock> live;
  for (size_t i = 0; i <= peak_index && i < process.memory_events.size(); ++i) {
    const auto& event = process.memory_events[i];
    if (event.is_free) {
      live.erase(event.address);
    } else {
      live[event.address] = {event.address, event.bytes, event.category, event.time};
    }
  }
  peak.num_live = live.size();
  for (const auto& [address, block] : live) peak.largest_live.push_back(block);
  std::sort(peak.largest_live.begin(), peak.largest_live.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.bytes > b.bytes; });
  if (peak.largest_live.size() > max_blocks) peak.largest_live.resize(max_blocks);
  return peak;
}

namespace {

std::vector<NameStatistics> statistics_of(
    std::unordered_map<analysis::StringId, std::vector<double>>& by_name) {
  std::vector<NameStatistics> table;
  table.reserve(by_name.size());
  for (auto& [name, durations] : by_name) {
    NameStatistics row;
    row.name = name;
    row.count = durations.size();
    for (double d : durations) {
      row.total_ns += d;
      row.max_ns = std::max(row.max_ns, d);
    }
    row.mean_ns = row.total_ns / static_cast<double>(durations.size());
    // Nearest-rank percentiles.
    auto percentile = [&](double p) {
      size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(durations.size())));
      size_t index = rank == 0 ? 0 : rank - 1;
      std::nth_element(durations.begin(), durations.begin() + static_cast<std::ptrdiff_t>(index),
                       durations.end());
      return durations[index];
    };
    row.p50_ns = percentile(0.50);
    row.p99_ns = percentile(0.99);
    table.push_back(row);
  }
  std::sort(table.begin(), table.end(), [](const NameStatistics& a, const NameStatistics& b) {
    return a.total_ns > b.total_ns;
  });
  return table;
}

}  // namespace

std::vector<NameStatistics> kernel_statistics(const TraceModel& model) {
  std::unordered_map<analysis::StringId, std::vector<double>> by_name;
  for (const ProcessTrack& process : model.processes) {
    for (const auto& stream : process.gpu_streams) {
      for (const auto& op : stream.ops) {
        if (op.kind == analysis::GpuOpKind::kSync) continue;
        by_name[op.name].push_back(static_cast<double>(op.duration()));
      }
    }
  }
  return statistics_of(by_name);
}

std::vector<NameStatistics> range_statistics(const TraceModel& model) {
  std::unordered_map<analysis::StringId, std::vector<double>> by_name;
  for (const ProcessTrack& process : model.processes) {
    for (const auto& thread : process.threads) {
      for (const auto& span : thread.spans)
        by_name[span.name].push_back(static_cast<double>(span.duration()));
    }
  }
  return statistics_of(by_name);
}

HeatmapCell heatmap_cell(const ExpertHeatmap& heatmap, int row, int expert) {
  HeatmapCell cell;
  if (row < 0 || row >= heatmap.num_layers || expert < 0 || expert >= heatmap.num_experts) {
    return cell;
  }
  cell.layer = heatmap.layer_ids[static_cast<size_t>(row)];
  cell.expert = expert;
  cell.tokens = heatmap.at(row, expert);
  const double layer_total = heatmap.layer_total(row);
  const double mean = layer_total / std::max(heatmap.num_experts, 1);
  cell.share = layer_total > 0 ? cell.tokens / layer_total : 0.0;
  cell.over_mean = mean > 0 ? cell.tokens / mean : 0.0;
  if (!heatmap.predicted.empty()) {
    cell.has_prediction = true;
    cell.predicted = heatmap.predicted[static_cast<size_t>(row) * heatmap.num_experts + expert];
  }
  return cell;
}

std::vector<size_t> sorted_statistics(const TraceModel& model,
                                      const std::vector<NameStatistics>& rows,
                                      StatisticsColumn column, bool ascending) {
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) -> double {
    const NameStatistics& row = rows[i];
    switch (column) {
      case StatisticsColumn::kCount:
        return static_cast<double>(row.count);
      case StatisticsColumn::kTotal:
        return row.total_ns;
      case StatisticsColumn::kMean:
        return row.mean_ns;
      case StatisticsColumn::kP50:
        return row.p50_ns;
      case StatisticsColumn::kP99:
        return row.p99_ns;
      default:
        return 0.0;
    }
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (column == StatisticsColumn::kName) {
      const int compare = model.name(rows[a].name).compare(model.name(rows[b].name));
      return ascending ? compare < 0 : compare > 0;
    }
    return ascending ? key(a) < key(b) : key(a) > key(b);
  });
  return order;
}

}  // namespace moescope::viewer
