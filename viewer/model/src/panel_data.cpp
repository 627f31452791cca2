#include "moescope/viewer/panel_data.h"

#include "moescope/analysis/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

namespace moescope::viewer {

using analysis::ProcessTrack;
using analysis::TraceModel;

ImbalanceSeries imbalance_series(const analysis::ExpertLoadAnalysis& load) {
  ImbalanceSeries series;
  std::set<int64_t> steps;
  for (const analysis::LayerLoad& layer : load.layers) {
    steps.insert(layer.steps.begin(), layer.steps.end());
    series.layer_ids.push_back(layer.layer);
  }
  series.steps.assign(steps.begin(), steps.end());
  for (const analysis::LayerLoad& layer : load.layers) {
    std::vector<double> values(series.steps.size(), std::nan(""));
    for (size_t i = 0; i < layer.steps.size(); ++i) {
      const auto column =
          std::lower_bound(series.steps.begin(), series.steps.end(), layer.steps[i]) -
          series.steps.begin();
      values[static_cast<size_t>(column)] = layer.max_over_mean_by_step[i];
      series.max_value = std::max(series.max_value, layer.max_over_mean_by_step[i]);
    }
    series.per_layer.push_back(std::move(values));
  }
  return series;
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
    std::sort(durations.begin(), durations.end());
    row.p50_ns = analysis::percentile_of_sorted(durations, 0.50);
    row.p99_ns = analysis::percentile_of_sorted(durations, 0.99);
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

HeatmapCell heatmap_cell(const analysis::ExpertLoadMatrix& heatmap, int row, int expert) {
  HeatmapCell cell;
  if (row < 0 || row >= heatmap.num_layers() || expert < 0 || expert >= heatmap.num_experts) {
    return cell;
  }
  cell.layer = heatmap.layer_ids[static_cast<size_t>(row)];
  cell.expert = expert;
  cell.tokens = heatmap.at(row, expert);
  const double layer_total = heatmap.layer_total(row);
  const double mean = layer_total / std::max(heatmap.num_experts, 1);
  // The share of the tokens shown (summed over the window's steps); LayerLoad::share is the
  // mean of each step's share. Both through analysis::share.
  cell.share = analysis::share(cell.tokens, layer_total);
  cell.over_mean = analysis::share(cell.tokens, mean);
  if (!heatmap.predicted.empty()) {
    cell.has_prediction = true;
    cell.predicted = heatmap.predicted[static_cast<size_t>(row) * heatmap.num_experts +
                                       static_cast<size_t>(expert)];
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
