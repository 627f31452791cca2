// Expert cost model and placement prediction (definitions in placement_prediction.h).
#include "moescope/analysis/placement_prediction.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/json_fields.h"
#include "moescope/analysis/layer_forward_samples.h"
#include "moescope/analysis/linear_fit.h"
#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

// `given`, else the model's breakdown computed into `storage`.
const TimeBreakdown& breakdown_of(const TraceModel& model, const TimeBreakdown* given,
                                  TimeBreakdown& storage) {
  if (given) return *given;
  storage = compute_time_breakdown(model);
  return storage;
}

// (rank, step) -> busy ms, over the kept steps.
std::map<std::pair<int32_t, int64_t>, double> busy_by_rank_step(const TraceModel& model,
                                                                const std::set<int64_t>& kept,
                                                                const TimeBreakdown* given) {
  std::map<std::pair<int32_t, int64_t>, double> busy;
  TimeBreakdown storage;
  for (const RankBreakdown& rank : breakdown_of(model, given, storage).ranks) {
    for (const StepBreakdown& step : rank.steps) {
      if (kept.count(step.step)) busy[{rank.rank, step.step}] = step.busy_ms();
    }
  }
  return busy;
}

std::set<int64_t> kept_steps(const TraceModel& model, size_t skip_steps) {
  const std::vector<int64_t> steps = steps_after_warmup(model, skip_steps);
  return {steps.begin(), steps.end()};
}

}  // namespace

std::vector<int64_t> steps_after_warmup(const TraceModel& model, size_t skip_steps) {
  std::vector<int64_t> steps = known_steps(model);
  steps.erase(steps.begin(), steps.begin() + std::min(skip_steps, steps.size()));
  return steps;
}

double RankPrediction::total_rows_before() const {
  double total = 0;
  for (double rows : rows_before) total += rows;
  return total;
}

double RankPrediction::total_rows_after() const {
  double total = 0;
  for (double rows : rows_after) total += rows;
  return total;
}

namespace {

// From the layer forwards of the kept steps: the work between each layer's all-to-alls against
// its rows where the trace has the all-to-alls (forward and backward measured), else the
// moe.experts spans' line x kExpertComputePasses. Not valid without them or their spread.
ExpertCostModel layer_forward_cost(const TraceModel& model, const std::set<int64_t>& kept) {
  std::vector<double> rows, experts_ms, between_rows, between_ms;
  for (const LayerForwardSample& sample : layer_forward_samples(model)) {
    if (!kept.count(sample.step)) continue;
    rows.push_back(sample.rows), experts_ms.push_back(sample.experts_ms);
    if (sample.between_all_to_alls_ms >= 0) {
      between_rows.push_back(sample.rows), between_ms.push_back(sample.between_all_to_alls_ms);
    }
  }
  const LinearFit experts = fit_line(rows, experts_ms);
  ExpertCostModel cost;
  if (!experts.valid || !(experts.slope > 0) || experts.samples < 3) return cost;
  cost.valid = cost.from_expert_spans = true;
  cost.forward_ms_per_row = experts.slope;
  cost.ms_per_row = experts.slope * kExpertComputePasses;
  cost.ms_per_row_stderr = experts.slope_stderr * kExpertComputePasses;
  cost.fixed_ms = experts.intercept;  // per layer forward
  cost.r_squared = experts.r_squared;
  cost.samples = experts.samples;
  const LinearFit between = fit_line(between_rows, between_ms);
  if (between.valid && between.slope > 0 && between.samples >= 3) {
    cost.between_all_to_alls = true;
    cost.ms_per_row = between.slope;
    cost.ms_per_row_stderr = between.slope_stderr;
    cost.fixed_ms = between.intercept;  // per layer, forward + backward
    cost.r_squared = between.r_squared;
    cost.samples = between.samples;
  }
  return cost;
}

}  // namespace

ExpertCostModel fit_expert_cost(const TraceModel& model, size_t skip_steps,
                                const TimeBreakdown* breakdown) {
  const std::set<int64_t> kept = kept_steps(model, skip_steps);
  if (ExpertCostModel spans = layer_forward_cost(model, kept); spans.valid) return spans;
  ExpertCostModel cost;
  std::map<std::pair<int32_t, int64_t>, double> rows;
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    if (kept.count(entry.step)) rows[{entry.rank, entry.step}] += entry.rows;
  }
  if (rows.empty()) {
    cost.problem = "no received-rows samples (RECEIVED expert load per rank) after the warm-up";
    return cost;
  }
  const auto busy = busy_by_rank_step(model, kept, breakdown);
  double n = 0, sum_x = 0, sum_y = 0, sum_xx = 0, sum_xy = 0, sum_yy = 0;
  for (const auto& [key, x] : rows) {
    auto found = busy.find(key);
    if (found == busy.end()) continue;
    const double y = found->second;
    n += 1, sum_x += x, sum_y += y, sum_xx += x * x, sum_xy += x * y, sum_yy += y * y;
  }
  cost.samples = size_t(n);
  const double var_x = sum_xx - sum_x * sum_x / std::max(n, 1.0);
  const double var_y = sum_yy - sum_y * sum_y / std::max(n, 1.0);
  const double cov_xy = sum_xy - sum_x * sum_y / std::max(n, 1.0);
  if (n < 3 || var_x <= 1e-9 * std::max(1.0, sum_xx)) {
    cost.problem = "the rows per rank and step do not vary (" + std::to_string(cost.samples) +
                   " samples): the cost per row cannot be told from the fixed time";
    return cost;
  }
  cost.ms_per_row = cov_xy / var_x;
  cost.fixed_ms = (sum_y - cost.ms_per_row * sum_x) / n;
  cost.r_squared = var_y > 0 ? cov_xy * cov_xy / (var_x * var_y) : 0.0;
  const double residual = std::max(0.0, var_y - cost.ms_per_row * cov_xy);
  cost.ms_per_row_stderr = n > 2 ? std::sqrt(residual / (n - 2) / var_x) : 0.0;
  if (!(cost.ms_per_row > 0)) {
    cost.problem = "busy time does not grow with the rows computed (slope " +
                   std::to_string(cost.ms_per_row) + " ms per row)";
    return cost;
  }
  cost.valid = true;
  return cost;
}

std::string describe_expert_cost(const ExpertCostModel& cost) {
  char text[256];
  if (cost.between_all_to_alls) {
    std::snprintf(text, sizeof(text),
                  "each layer's work between its all-to-alls, forward + backward: %.3f ms + "
                  "%.5f ms x rows, R^2 %.2f over %zu layer steps (%.2f x the moe.experts "
                  "forward's %.6f ms per row)",
                  cost.fixed_ms, cost.ms_per_row, cost.r_squared, cost.samples,
                  cost.forward_ms_per_row > 0 ? cost.ms_per_row / cost.forward_ms_per_row : 0.0,
                  cost.forward_ms_per_row);
  } else if (cost.from_expert_spans) {
    std::snprintf(text, sizeof(text),
                  "moe.experts spans: %.3f ms + %.6f ms x rows per layer forward, R^2 %.2f over "
                  "%zu forwards; x %.0f passes = %.5f ms per row",
                  cost.fixed_ms, cost.forward_ms_per_row, cost.r_squared, cost.samples,
                  kExpertComputePasses, cost.ms_per_row);
  } else {
    std::snprintf(text, sizeof(text),
                  "busy = %.3f ms + %.5f ms x rows computed, R^2 %.2f over %zu rank-steps",
                  cost.fixed_ms, cost.ms_per_row, cost.r_squared, cost.samples);
  }
  return text;
}

std::vector<RankMeasurement> measure_rank_load(const TraceModel& model,
                                               const std::vector<uint32_t>& layers,
                                               size_t skip_steps, const TimeBreakdown* breakdown) {
  const std::set<int64_t> kept = kept_steps(model, skip_steps);
  std::map<int32_t, RankMeasurement> ranks;
  std::map<int32_t, std::set<int64_t>> row_steps;
  for (const ProcessTrack& process : model.processes) {
    ranks[process.rank].rank = process.rank;
    ranks[process.rank].rows.assign(layers.size(), 0.0);
  }
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    auto layer = std::find(layers.begin(), layers.end(), entry.layer);
    if (!kept.count(entry.step) || layer == layers.end()) continue;
    RankMeasurement& rank = ranks[entry.rank];
    rank.rank = entry.rank;
    rank.rows.resize(layers.size(), 0.0);
    rank.rows[size_t(layer - layers.begin())] += entry.rows;
    row_steps[entry.rank].insert(entry.step);
  }
  std::map<int32_t, std::pair<double, double>> busy;  // rank -> (sum, steps)
  for (const auto& [key, ms] : busy_by_rank_step(model, kept, breakdown)) {
    busy[key.first].first += ms;
    busy[key.first].second += 1;
  }
  std::vector<RankMeasurement> result;
  for (auto& [rank, measurement] : ranks) {
    const double steps = double(std::max<size_t>(1, row_steps[rank].size()));
    for (double& rows : measurement.rows) rows /= steps;
    const auto& [sum, count] = busy[rank];
    measurement.busy_ms = count > 0 ? sum / count : 0.0;
    result.push_back(std::move(measurement));
  }
  return result;
}

std::vector<double> mean_busiest_rows_per_step(const TraceModel& model,
                                               const std::vector<uint32_t>& layers,
                                               size_t skip_steps) {
  const std::set<int64_t> kept = kept_steps(model, skip_steps);
  std::map<std::pair<uint32_t, int64_t>, double> busiest;  // (layer, step) -> max over ranks
  for (const RankStepRows& entry : received_rows_by_rank(model)) {
    if (!kept.count(entry.step)) continue;
    double& rows = busiest[{entry.layer, entry.step}];
    rows = std::max(rows, entry.rows);
  }
  std::vector<double> sum(layers.size(), 0.0), steps(layers.size(), 0.0);
  for (const auto& [key, rows] : busiest) {
    const auto layer = std::find(layers.begin(), layers.end(), key.first);
    if (layer == layers.end()) continue;
    sum[size_t(layer - layers.begin())] += rows;
    steps[size_t(layer - layers.begin())] += 1;
  }
  for (size_t l = 0; l < sum.size(); ++l) sum[l] = steps[l] > 0 ? sum[l] / steps[l] : 0.0;
  return sum;
}

PlacementPrediction predict_placement(const TraceModel& model,
                                      const std::vector<std::vector<double>>& gpu_loads_after,
                                      size_t skip_steps, const TimeBreakdown* breakdown,
                                      const PlacementChangeCosts* costs,
                                      const std::vector<double>* busiest_rows_after) {
  PlacementPrediction prediction;
  TimeBreakdown storage;
  breakdown = &breakdown_of(model, breakdown, storage);  // computed once for all three uses
  prediction.cost = fit_expert_cost(model, skip_steps, breakdown);
  if (!prediction.cost.valid) {
    throw std::invalid_argument("no expert cost model from this trace: " + prediction.cost.problem);
  }
  const ExpertLoadAnalysis load = analyze_expert_load(model);
  for (const LayerLoad& layer : load.layers) prediction.layers.push_back(layer.layer);
  if (gpu_loads_after.size() != prediction.layers.size()) {
    throw std::invalid_argument("the plan has " + std::to_string(gpu_loads_after.size()) +
                                " layers, the trace " + std::to_string(prediction.layers.size()));
  }
  const std::vector<RankMeasurement> measured =
      measure_rank_load(model, prediction.layers, skip_steps, breakdown);
  for (const auto& loads : gpu_loads_after) {
    if (loads.size() != measured.size()) {
      throw std::invalid_argument("the plan places experts on " + std::to_string(loads.size()) +
                                  " GPUs, the trace has " + std::to_string(measured.size()) +
                                  " ranks: plan with --gpus " + std::to_string(measured.size()));
    }
  }
  const double ms_per_row = prediction.cost.ms_per_row;
  for (size_t g = 0; g < measured.size(); ++g) {
    RankPrediction rank;
    rank.rank = measured[g].rank;
    rank.rows_before = measured[g].rows;
    for (const auto& loads : gpu_loads_after) rank.rows_after.push_back(loads[g]);
    rank.busy_ms_before = measured[g].busy_ms;
    rank.expert_ms_before = ms_per_row * rank.total_rows_before();
    rank.expert_ms_after = ms_per_row * rank.total_rows_after();
    rank.busy_ms_after = rank.busy_ms_before + rank.expert_ms_after - rank.expert_ms_before;
    prediction.ranks.push_back(std::move(rank));
  }
  if (busiest_rows_after && busiest_rows_after->size() != prediction.layers.size()) {
    throw std::invalid_argument("the plan's busiest rows per step cover " +
                                std::to_string(busiest_rows_after->size()) + " layers, the trace " +
                                std::to_string(prediction.layers.size()));
  }
  const std::vector<double> busiest_before =
      busiest_rows_after ? mean_busiest_rows_per_step(model, prediction.layers, skip_steps)
                         : std::vector<double>{};
  double rows_change = 0;  // the busiest rank's, summed over layers
  for (size_t layer = 0; layer < prediction.layers.size(); ++layer) {
    if (busiest_rows_after) {
      rows_change += (*busiest_rows_after)[layer] - busiest_before[layer];
      continue;
    }
    double max_before = 0, max_after = 0;  // of the mean rows (a plan from a loads file)
    for (const RankPrediction& rank : prediction.ranks) {
      max_before = std::max(max_before, rank.rows_before[layer]);
      max_after = std::max(max_after, rank.rows_after[layer]);
    }
    rows_change += max_after - max_before;
  }
  prediction.terms.push_back(
      {"expert compute", ms_per_row * rows_change,
       prediction.cost.ms_per_row_stderr * std::abs(rows_change),
       std::string(busiest_rows_after ? "each step's busiest rank's rows (mean over the steps)"
                                      : "busiest rank's mean rows") +
           " x ms/row fitted over " + std::to_string(prediction.cost.samples) +
           (prediction.cost.from_expert_spans ? " layer forwards' moe.experts spans"
                                              : " rank-steps")});
  if (costs) {
    if (costs->replicated_after.size() != prediction.layers.size() ||
        costs->replicated_before.size() != prediction.layers.size()) {
      throw std::invalid_argument(
          "the placement costs cover " + std::to_string(costs->replicated_after.size()) +
          " layers, the trace has " + std::to_string(prediction.layers.size()));
    }
    for (StepCostTerm& term : placement_cost_terms(fit_comm_costs(model), *costs, rows_change)) {
      prediction.terms.push_back(std::move(term));
    }
    prediction.window_steps = costs->window_steps;
  }
  double variance = 0;
  for (const StepCostTerm& term : prediction.terms) {
    prediction.step_ms_change += term.ms;
    variance += term.stderr_ms * term.stderr_ms;
  }
  prediction.step_ms_change_stderr = std::sqrt(variance);
  // Measured step time: the mean over kept steps of the mean over ranks.
  const std::set<int64_t> kept = kept_steps(model, skip_steps);
  double step_sum = 0, step_count = 0;
  for (const RankBreakdown& rank : breakdown->ranks) {
    for (const StepBreakdown& step : rank.steps) {
      if (kept.count(step.step)) step_sum += step.step_ms, step_count += 1;
    }
  }
  prediction.step_ms_before = step_count > 0 ? step_sum / step_count : 0.0;
  return prediction;
}

MOESCOPE_JSON_FIELDS(RankPrediction, rank, rows_before, rows_after, busy_ms_before, busy_ms_after,
                     expert_ms_before, expert_ms_after)
MOESCOPE_JSON_FIELDS(StepCostTerm, name, ms, stderr_ms, basis)

std::string prediction_to_json(const PlacementPrediction& prediction) {
  const ExpertCostModel& cost = prediction.cost;
  nlohmann::ordered_json object = {
      {"cost_model",
       {{"model", cost.between_all_to_alls
                      ? "ms_per_row = each layer's work between its all-to-alls (forward + "
                        "backward) per received row (least squares over layer steps)"
                  : cost.from_expert_spans
                      ? "ms_per_row = 3 x the moe.experts spans' ms per forward row (least "
                        "squares over layer forwards)"
                      : "busy_ms = fixed_ms + ms_per_row * rows (least squares over rank x step)"},
        {"from_expert_spans", cost.from_expert_spans},
        {"between_all_to_alls", cost.between_all_to_alls},
        {"forward_ms_per_row", cost.forward_ms_per_row},
        {"fixed_ms", cost.fixed_ms},
        {"ms_per_row", cost.ms_per_row},
        {"ms_per_row_stderr", cost.ms_per_row_stderr},
        {"r_squared", cost.r_squared},
        {"samples", cost.samples}}},
      {"layers", prediction.layers},
      {"step_ms_before", prediction.step_ms_before},
      {"step_ms_change", prediction.step_ms_change},
      {"step_ms_after", prediction.step_ms_after()},
      {"step_ms_change_stderr", prediction.step_ms_change_stderr},
      {"step_ms_change_low", prediction.change_low()},
      {"step_ms_change_high", prediction.change_high()},
      {"window_steps", prediction.window_steps},
      {"terms", prediction.terms},
      {"ranks", prediction.ranks}};
  return object.dump();
}

namespace {

// Checked reads of the prediction's values: a plan file is user input (edited, truncated,
// written by another version), and nlohmann's get<int>() of 1e300 or get<uint32_t>() of -1
// would be undefined behaviour or a silent wrap.
double finite_at(const nlohmann::json& object, const char* key) {
  const nlohmann::json& value = object.at(key);
  if (!value.is_number() || !std::isfinite(value.get<double>())) {
    throw std::invalid_argument(std::string("\"") + key + "\" is " + value.dump() +
                                ", not a finite number");
  }
  return value.get<double>();
}

int64_t whole_number(const nlohmann::json& value, const std::string& what, int64_t min,
                     int64_t max) {
  std::optional<int64_t> number;
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() <= uint64_t(INT64_MAX)) number = int64_t(value.get<uint64_t>());
  } else if (value.is_number_integer()) {
    number = value.get<int64_t>();
  } else if (value.is_number_float() && std::trunc(value.get<double>()) == value.get<double>()) {
    number = trace::checked_int64(value.get<double>());
  }
  if (!number || *number < min || *number > max) {
    throw std::invalid_argument(what + " is " + value.dump() + ", not an integer in [" +
                                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return *number;
}

std::vector<double> finite_rows(const nlohmann::json& object, const char* key, size_t layers) {
  const nlohmann::json& array = object.at(key);
  if (!array.is_array() || array.size() != layers) {
    throw std::invalid_argument(std::string("\"") + key + "\" must be an array of " +
                                std::to_string(layers) + " number(s), one per layer");
  }
  std::vector<double> rows;
  for (const auto& value : array) {
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      throw std::invalid_argument(std::string("\"") + key + "\" holds " + value.dump() +
                                  ", not a finite number");
    }
    rows.push_back(value.get<double>());
  }
  return rows;
}

// More MoE layers or ranks than any model or job has: a damaged file, not a plan.
constexpr int64_t kMaxLayerId = 1 << 20;
constexpr int64_t kMaxRank = 1 << 20;

}  // namespace

PlacementPrediction prediction_from_json(const std::string& json_object_text) {
  PlacementPrediction prediction;
  try {
    const nlohmann::json object = nlohmann::json::parse(json_object_text);
    if (!object.is_object()) throw std::invalid_argument("the prediction is not a JSON object");
    const auto& cost = object.at("cost_model");
    prediction.cost.valid = true;
    prediction.cost.fixed_ms = finite_at(cost, "fixed_ms");
    prediction.cost.ms_per_row = finite_at(cost, "ms_per_row");
    prediction.cost.r_squared = finite_at(cost, "r_squared");
    prediction.cost.samples =
        static_cast<size_t>(whole_number(cost.at("samples"), "\"samples\"", 0, INT64_MAX));
    const auto& layers = object.at("layers");
    if (!layers.is_array()) throw std::invalid_argument("\"layers\" is not an array");
    std::set<uint32_t> distinct;
    for (const auto& layer : layers) {
      const auto id = static_cast<uint32_t>(whole_number(layer, "a layer id", 0, kMaxLayerId));
      if (!distinct.insert(id).second) {
        throw std::invalid_argument("layer " + std::to_string(id) + " is listed twice");
      }
      prediction.layers.push_back(id);
    }
    prediction.step_ms_before = finite_at(object, "step_ms_before");
    prediction.step_ms_change = finite_at(object, "step_ms_change");
    // Written since the step time counts every cost; older plans hold expert compute only.
    if (cost.contains("from_expert_spans") && cost.at("from_expert_spans").is_boolean()) {
      prediction.cost.from_expert_spans = cost.at("from_expert_spans").get<bool>();
      prediction.cost.forward_ms_per_row = finite_at(cost, "forward_ms_per_row");
      if (cost.contains("between_all_to_alls") && cost.at("between_all_to_alls").is_boolean()) {
        prediction.cost.between_all_to_alls = cost.at("between_all_to_alls").get<bool>();
      }
    }
    if (cost.contains("ms_per_row_stderr")) {
      prediction.cost.ms_per_row_stderr = finite_at(cost, "ms_per_row_stderr");
    }
    if (object.contains("step_ms_change_stderr")) {
      prediction.step_ms_change_stderr = finite_at(object, "step_ms_change_stderr");
      if (prediction.step_ms_change_stderr < 0) {
        throw std::invalid_argument("\"step_ms_change_stderr\" is negative");
      }
    }
    if (object.contains("window_steps")) {
      prediction.window_steps = finite_at(object, "window_steps");
    }
    if (object.contains("terms")) {
      const auto& terms = object.at("terms");
      if (!terms.is_array()) throw std::invalid_argument("\"terms\" is not an array");
      for (const auto& entry : terms) {
        if (!entry.is_object() || !entry.at("name").is_string()) {
          throw std::invalid_argument("a term is not an object with a \"name\"");
        }
        StepCostTerm term;
        term.name = entry.at("name").get<std::string>();
        term.ms = finite_at(entry, "ms");
        term.stderr_ms = finite_at(entry, "stderr_ms");
        if (entry.contains("basis") && entry.at("basis").is_string()) {
          term.basis = entry.at("basis").get<std::string>();
        }
        prediction.terms.push_back(std::move(term));
      }
    }
    const auto& ranks = object.at("ranks");
    if (!ranks.is_array()) throw std::invalid_argument("\"ranks\" is not an array");
    std::set<int32_t> seen_ranks;
    for (const auto& entry : ranks) {
      RankPrediction rank;
      rank.rank = static_cast<int32_t>(whole_number(entry.at("rank"), "a rank", 0, kMaxRank));
      if (!seen_ranks.insert(rank.rank).second) {
        throw std::invalid_argument("rank " + std::to_string(rank.rank) + " is listed twice");
      }
      rank.rows_before = finite_rows(entry, "rows_before", prediction.layers.size());
      rank.rows_after = finite_rows(entry, "rows_after", prediction.layers.size());
      rank.busy_ms_before = finite_at(entry, "busy_ms_before");
      rank.busy_ms_after = finite_at(entry, "busy_ms_after");
      rank.expert_ms_before = finite_at(entry, "expert_ms_before");
      rank.expert_ms_after = finite_at(entry, "expert_ms_after");
      prediction.ranks.push_back(std::move(rank));
    }
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(std::string("not a placement prediction: ") + error.what());
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(std::string("not a placement prediction: ") + error.what());
  }
  return prediction;
}

}  // namespace moescope::analysis
