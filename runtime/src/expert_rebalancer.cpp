#include "moescope/runtime/expert_rebalancer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "moescope/balancer/layer_rebalance.h"
#include "moescope/recorder.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/optimizer_state.h"
#include "moescope/runtime/state_archive.h"

namespace moescope::runtime {
namespace {

int64_t num_experts_of(const std::vector<MoELayer>& layers) {
  TORCH_CHECK(!layers.empty(), "ExpertRebalancer: no MoE layers given");
  return layers.front()->config().num_experts;
}

void record_values(int64_t step, const MoELayerImpl& layer, uint32_t quantity,
                   const std::vector<float>& values) {
  moescope_expert_values(step, static_cast<uint32_t>(layer.config().layer_index),
                         static_cast<int32_t>(layer.group().rank()), quantity, values.data(),
                         static_cast<uint32_t>(values.size()));
}

}  // namespace

ExpertRebalancer::ExpertRebalancer(std::vector<MoELayer> layers, const RebalancerOptions& options,
                                   std::vector<torch::optim::Optimizer*> optimizers)
    : layers_(std::move(layers)),
      options_(options),
      optimizers_(std::move(optimizers)),
      extra_slot_state_(layers_.size()),
      forecaster_(static_cast<int>(layers_.size()), static_cast<int>(num_experts_of(layers_)),
                  options.predictor, options.accuracy_horizon_steps) {
  TORCH_CHECK(options_.interval_steps >= 1, "RebalancerOptions.interval_steps must be >= 1");
  TORCH_CHECK(options_.warmup_steps >= 0, "RebalancerOptions.warmup_steps must be >= 0");
  TORCH_CHECK(options_.imbalance_threshold >= 1.0,
              "RebalancerOptions.imbalance_threshold must be >= 1");
  TORCH_CHECK(options_.transfer_bytes_per_second > 0,
              "RebalancerOptions.transfer_bytes_per_second must be > 0");
  const MoELayerImpl& first = *layers_.front();
  for (const MoELayer& layer : layers_) {
    TORCH_CHECK(layer->config().num_experts == first.config().num_experts &&
                    layer->group().backend == first.group().backend,
                "ExpertRebalancer: layer ", layer->config().layer_index,
                " has another expert count or expert-parallel group than layer ",
                first.config().layer_index);
  }
  for (const torch::optim::Optimizer* optimizer : optimizers_) {
    TORCH_CHECK(optimizer != nullptr, "ExpertRebalancer: optimizers holds a null pointer");
  }
}

void ExpertRebalancer::set_extra_slot_state(size_t layer_position,
                                            std::vector<at::Tensor> tensors) {
  TORCH_CHECK(layer_position < layers_.size(), "ExpertRebalancer::set_extra_slot_state: layer ",
              "position ", layer_position, " is outside [0, ", layers_.size(), ")");
  extra_slot_state_[layer_position] = std::move(tensors);
}

namespace {

// The trace's reason codes are the balancer's.
static_assert(static_cast<uint32_t>(balancer::RebalanceReason::kPays) == MOESCOPE_REBALANCE_PAYS &&
              static_cast<uint32_t>(balancer::RebalanceReason::kCostsExceedGain) ==
                  MOESCOPE_REBALANCE_COSTS_EXCEED_GAIN &&
              static_cast<uint32_t>(balancer::RebalanceReason::kWithinUncertainty) ==
                  MOESCOPE_REBALANCE_WITHIN_UNCERTAINTY &&
              static_cast<uint32_t>(balancer::RebalanceReason::kBalanced) ==
                  MOESCOPE_REBALANCE_BALANCED &&
              static_cast<uint32_t>(balancer::RebalanceReason::kNoMove) ==
                  MOESCOPE_REBALANCE_NO_MOVE &&
              static_cast<uint32_t>(balancer::RebalanceReason::kImbalanceRuleApplied) ==
                  MOESCOPE_REBALANCE_IMBALANCE_RULE_APPLIED &&
              static_cast<uint32_t>(balancer::RebalanceReason::kImbalanceRuleKept) ==
                  MOESCOPE_REBALANCE_IMBALANCE_RULE_KEPT);

constexpr size_t kNumCostFits = 4;  // compute, dispatch, all-reduce, migration
constexpr size_t kCostSums = kNumCostFits * balancer::RunningLineFit::kNumSums;

}  // namespace

std::vector<double> ExpertRebalancer::take_local_cost_sums() {
  balancer::RunningLineFit compute, dispatch, all_reduce;
  for (MoELayer& layer : layers_) {
    const LayerCostSamples samples = layer->take_cost_samples();
    compute.merge(samples.expert_compute.sums());
    dispatch.merge(samples.dispatch.sums());
    all_reduce.merge(samples.all_reduce.sums());
  }
  all_reduce.merge(own_all_reduce_.sums());
  std::vector<double> sums;
  sums.reserve(kCostSums);
  for (const balancer::RunningLineFit* fit : {&compute, &dispatch, &all_reduce, &own_migrations_}) {
    sums.insert(sums.end(), fit->sums().begin(), fit->sums().end());
  }
  own_all_reduce_ = {};
  own_migrations_ = {};
  return sums;
}

balancer::RebalanceCostRates ExpertRebalancer::cost_rates(double assumed_ms_per_row) const {
  balancer::RebalanceCostRates rates;
  rates.compute = compute_fit_.estimate();
  rates.all_to_all = dispatch_fit_.estimate();
  rates.all_reduce = all_reduce_fit_.estimate();
  rates.migration = migration_fit_.estimate();
  rates.compute_passes_per_step = options_.compute_passes_per_step;
  rates.all_to_alls_per_step = options_.all_to_alls_per_step;
  rates.assumed_ms_per_row = assumed_ms_per_row;
  rates.assumed_bytes_per_ms = options_.transfer_bytes_per_second / 1e3;
  return rates;
}

int64_t ExpertRebalancer::local_step_sums_size() const {
  return static_cast<int64_t>(layers_.size()) * forecaster_.num_experts() + 1 +
         static_cast<int64_t>(kCostSums);
}

void ExpertRebalancer::observe_all_reduce(double bytes, double milliseconds) {
  own_all_reduce_.add(bytes, milliseconds);
}

at::Tensor ExpertRebalancer::local_step_sums(double step_seconds) {
  const auto num_layers = static_cast<int64_t>(layers_.size());
  const int64_t num_experts = forecaster_.num_experts();
  // [layers * experts] loads, the step time, then the cost fits' sums.
  const int64_t time_at = num_layers * num_experts, costs_at = time_at + 1;
  at::Tensor sums = at::zeros({local_step_sums_size()}, at::kDouble);
  for (int64_t l = 0; l < num_layers; ++l) {
    const at::Tensor& tokens = layers_[l]->last_tokens_per_expert();
    TORCH_CHECK(tokens.defined(), "ExpertRebalancer::after_step: layer ",
                layers_[l]->config().layer_index, " has not run forward yet");
    sums.narrow(0, l * num_experts, num_experts).copy_(tokens.to(at::kCPU, at::kDouble));
  }
  sums[time_at] = step_seconds;
  const std::vector<double> local_costs = take_local_cost_sums();
  std::copy(local_costs.begin(), local_costs.end(), sums.data_ptr<double>() + costs_at);
  return sums;
}

std::vector<RebalanceDecision> ExpertRebalancer::after_step(int64_t step, double step_seconds) {
  at::Tensor summed = local_step_sums(step_seconds);
  // Gloo sums CPU tensors; NCCL needs them on the device.
  const at::Device device = layers_.front()->experts->w_gate_up.device();
  const auto reduce_start = std::chrono::steady_clock::now();
  summed = all_reduce_sum(summed.to(device), layers_.front()->group(), "ar.rebalance_loads");
  if (device.is_cpu() && layers_.front()->group().is_distributed()) {
    own_all_reduce_.add(static_cast<double>(summed.numel()) * sizeof(double),
                        milliseconds_since(reduce_start));
  }
  return after_summed_step(step, summed);
}

std::vector<RebalanceDecision> ExpertRebalancer::after_summed_step(int64_t step,
                                                                   const at::Tensor& summed_sums) {
  TORCH_CHECK(summed_sums.dim() == 1 && summed_sums.size(0) == local_step_sums_size(),
              "ExpertRebalancer::after_summed_step: the summed step sums must be [",
              local_step_sums_size(), "] (local_step_sums summed over the group), got ",
              summed_sums.sizes());
  const auto num_layers = static_cast<int64_t>(layers_.size());
  const int64_t num_experts = forecaster_.num_experts();
  const int64_t time_at = num_layers * num_experts, costs_at = time_at + 1;
  const at::Tensor summed = summed_sums.to(at::kCPU, at::kDouble).contiguous();
  const double* values = summed.data_ptr<double>();
  balancer::RunningLineFit* fits[kNumCostFits] = {&compute_fit_, &dispatch_fit_, &all_reduce_fit_,
                                                  &migration_fit_};
  for (size_t f = 0; f < kNumCostFits; ++f) {
    balancer::RunningLineFit::Sums sums;
    std::copy_n(values + costs_at + f * sums.size(), sums.size(), sums.begin());
    fits[f]->merge(sums);
  }

  for (int64_t l = 0; l < num_layers; ++l) {
    const std::span<const double> loads(values + l * num_experts, static_cast<size_t>(num_experts));
    if (const auto accuracy = forecaster_.observe(static_cast<int>(l), loads);
        accuracy && is_trace_recording()) {
      const std::string name =
          "balancer.prediction_wape.layer" + std::to_string(layers_[l]->config().layer_index);
      moescope_counter(moescope_intern(name.c_str()), accuracy->weighted_absolute_percentage_error);
    }
  }
  ++observed_steps_;
  ++steps_since_decision_;
  step_seconds_sum_ += values[time_at] / static_cast<double>(layers_.front()->group().size());

  std::vector<RebalanceDecision> decisions;
  if (!options_.decides_after(observed_steps_, steps_since_decision_)) return decisions;
  const double mean_step_seconds = step_seconds_sum_ / static_cast<double>(steps_since_decision_);
  // Until the compute is measured: the whole step grows with the busiest rank's rows, summed
  // over the layers (the assumption of the imbalance rule; an upper bound).
  double rows = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    rows += balancer::busiest_gpu_load(forecaster_.predict(static_cast<int>(l)),
                                       layers_[l]->expert_slots().placement());
  }
  const double assumed_ms_per_row = rows > 0 ? mean_step_seconds * 1e3 / rows : 0.0;
  for (size_t l = 0; l < layers_.size(); ++l)
    decisions.push_back(decide(l, step, mean_step_seconds, assumed_ms_per_row));
  steps_since_decision_ = 0;
  step_seconds_sum_ = 0.0;
  return decisions;
}

RebalanceDecision ExpertRebalancer::decide(size_t layer_position, int64_t step, double step_seconds,
                                           double assumed_ms_per_row) {
  MoELayerImpl& layer = *layers_[layer_position];
  const balancer::ExpertPlacement& current = layer.expert_slots().placement();
  const std::vector<double> forecast = forecaster_.predict(static_cast<int>(layer_position));

  // Bytes of one expert slot: its weights plus the optimizer state that travels with them;
  // its gradient (what a replica's all-reduce sums) is one weights' worth.
  balancer::ExpertSlotBytes bytes;
  for (const at::Tensor& weight : {layer.experts->w_gate_up, layer.experts->w_down}) {
    int64_t copies = 1;
    for (const torch::optim::Optimizer* optimizer : optimizers_) {
      copies += static_cast<int64_t>(optimizer_state_tensors(*optimizer, weight).size());
    }
    const double weight_bytes =
        static_cast<double>(weight[0].numel() * static_cast<int64_t>(weight.element_size()));
    bytes.migrated += static_cast<double>(copies) * weight_bytes;
    bytes.gradient += weight_bytes;
  }
  for (const at::Tensor& state : extra_slot_state_[layer_position]) {
    bytes.migrated +=
        static_cast<double>(state[0].numel() * static_cast<int64_t>(state.element_size()));
  }
  bytes.row = static_cast<double>(layer.config().hidden_size *
                                  static_cast<int64_t>(layer.experts->w_gate_up.element_size()));
  balancer::LayerRebalanceDecision planned;
  try {
    planned = balancer::decide_layer_rebalance(
        forecast, forecaster_.accuracy(static_cast<int>(layer_position)).recent_errors(), current,
        options_, bytes, cost_rates(assumed_ms_per_row), step_seconds);
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, "ExpertRebalancer: planning layer ", layer.config().layer_index,
                " failed: ", error.what());
  }
  RebalanceDecision decision;
  decision.step = step;
  decision.layer = layer.config().layer_index;
  decision.imbalance_before = planned.imbalance_before;
  decision.imbalance_after = planned.imbalance_after;
  decision.busiest_rows_before = planned.busiest_rows_before;
  decision.busiest_rows_after = planned.busiest_rows_after;
  decision.bytes_to_move = static_cast<int64_t>(planned.bytes_to_move);
  decision.verdict = planned.verdict;
  decision.gain_seconds = planned.imbalance_gain_seconds;
  decision.cost_seconds = planned.imbalance_cost_seconds;
  decision.applied = planned.verdict.apply;
  if (decision.applied) {
    decision.change =
        layer.apply_placement(planned.candidate, optimizers_, extra_slot_state_[layer_position]);
    // The move's time on this rank; the sums travel with the next step's all-reduce.
    own_migrations_.add(static_cast<double>(decision.bytes_to_move), decision.change.seconds * 1e3);
  }
  // The dispatch buffers follow the forecast: the busiest rank's predicted rows, with headroom.
  layer.reserve_dispatch_buffers(
      balancer::busiest_gpu_load(forecast, layer.expert_slots().placement()));

  if (is_trace_recording()) record_decision(decision, layer, forecast);
  return decision;
}

void ExpertRebalancer::record_decision(const RebalanceDecision& decision, const MoELayerImpl& layer,
                                       const std::vector<double>& forecast) const {
  moescope_rebalance_info info{};
  info.step = decision.step;
  info.layer = static_cast<uint32_t>(decision.layer);
  info.rank = static_cast<int32_t>(layer.group().rank());
  info.imbalance_before = static_cast<float>(decision.imbalance_before);
  info.imbalance_after = static_cast<float>(decision.imbalance_after);
  info.bytes_moved =
      static_cast<uint64_t>(decision.applied ? decision.change.migration.bytes_received : 0);
  info.duration_ns = static_cast<uint64_t>(decision.change.seconds * 1e9);
  info.applied = decision.applied ? 1 : 0;
  const balancer::RebalanceVerdict& verdict = decision.verdict;
  moescope_rebalance_costs costs{};
  costs.busiest_rows_before = static_cast<float>(decision.busiest_rows_before);
  costs.busiest_rows_after = static_cast<float>(decision.busiest_rows_after);
  costs.gain_ms = static_cast<float>(verdict.gain_ms);
  costs.replica_sync_ms = static_cast<float>(verdict.replica_sync_ms);
  costs.migration_ms = static_cast<float>(verdict.migration_ms);
  costs.window_steps = static_cast<float>(verdict.window_steps);
  costs.net_ms = static_cast<float>(verdict.net_ms);
  costs.net_stderr_ms = static_cast<float>(verdict.net_stderr_ms);
  costs.reason = static_cast<uint32_t>(verdict.reason);
  moescope_rebalance_decision(&info, &costs);
  record_values(decision.step, layer, MOESCOPE_QUANTITY_PREDICTED_LOAD,
                std::vector<float>(forecast.begin(), forecast.end()));
  const auto counts = layer.expert_slots().placement().logcnt(0);
  record_values(decision.step, layer, MOESCOPE_QUANTITY_REPLICAS,
                std::vector<float>(counts.begin(), counts.end()));
}

// Archive layout:
//   format                        "moescope.expert_rebalancer.v1"
//   observed_steps, steps_since_decision   int
//   step_seconds_sum              double
//   num_layers                    int
//   layer<i>/layer_index          int (MoEConfig.layer_index)
//   layer<i>/num_experts, num_gpus   int
//   layer<i>/physical_to_logical  [S] int32, the logical expert in each slot
//   forecast/...                  save_forecaster()
constexpr const char* kRebalancerFormat = "moescope.expert_rebalancer.v1";

void ExpertRebalancer::save(torch::serialize::OutputArchive& archive) const {
  archive.write("format", c10::IValue(std::string(kRebalancerFormat)));
  archive.write("observed_steps", c10::IValue(observed_steps_));
  archive.write("steps_since_decision", c10::IValue(steps_since_decision_));
  archive.write("step_seconds_sum", c10::IValue(step_seconds_sum_));
  archive.write("num_layers", c10::IValue(static_cast<int64_t>(layers_.size())));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const balancer::ExpertPlacement& placement = layers_[l]->expert_slots().placement();
    torch::serialize::OutputArchive layer;
    layer.write("layer_index", c10::IValue(layers_[l]->config().layer_index));
    layer.write("num_experts", c10::IValue(static_cast<int64_t>(placement.num_logical_experts)));
    layer.write("num_gpus", c10::IValue(static_cast<int64_t>(placement.num_gpus)));
    layer.write("physical_to_logical", at::tensor(placement.physical_to_logical, at::kInt));
    archive.write("layer" + std::to_string(l), layer);
  }
  torch::serialize::OutputArchive forecast;
  save_forecaster(forecaster_, forecast);
  archive.write("forecast", forecast);
}

void ExpertRebalancer::load(torch::serialize::InputArchive& archive, const std::string& what) {
  const std::string format = read_archive_value(archive, "format", what).toStringRef();
  TORCH_CHECK(format == kRebalancerFormat, what, ": format ", format, ", expected ",
              kRebalancerFormat);
  const int64_t num_layers = read_archive_value(archive, "num_layers", what).toInt();
  TORCH_CHECK(num_layers == static_cast<int64_t>(layers_.size()), what, ": saved for ", num_layers,
              " MoE layers, this rebalancer has ", layers_.size());
  // Everything is read and checked before any layer changes.
  std::vector<balancer::ExpertPlacement> placements;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string key = "layer" + std::to_string(l);
    torch::serialize::InputArchive layer = read_archive_nested(archive, key, what);
    const std::string where = what + "/" + key;
    const MoEConfig& config = layers_[l]->config();
    const int64_t layer_index = read_archive_value(layer, "layer_index", where).toInt();
    const int64_t num_experts = read_archive_value(layer, "num_experts", where).toInt();
    const int64_t num_gpus = read_archive_value(layer, "num_gpus", where).toInt();
    TORCH_CHECK(layer_index == config.layer_index && num_experts == config.num_experts &&
                    num_gpus == layers_[l]->group().size(),
                where, ": saved for layer ", layer_index, " with ", num_experts, " experts over ",
                num_gpus, " ranks, this rebalancer's layer is ", config.layer_index, " with ",
                config.num_experts, " over ", layers_[l]->group().size());
    const at::Tensor saved = read_archive_tensor(layer, "physical_to_logical", where)
                                 .to(at::kCPU, at::kInt)
                                 .contiguous();
    TORCH_CHECK(saved.dim() == 1, where, ": physical_to_logical must be 1-d, got ", saved.sizes());
    try {
      placements.push_back(balancer::placement_from_physical_to_logical(
          1, static_cast<int>(num_experts), static_cast<int>(num_gpus),
          std::span<const int32_t>(saved.data_ptr<int32_t>(), static_cast<size_t>(saved.numel()))));
    } catch (const std::invalid_argument& error) {
      TORCH_CHECK(false, where, ": ", error.what());
    }
    TORCH_CHECK(placements.back().num_physical_experts == num_expert_slots(config), where,
                ": the saved placement has ", placements.back().num_physical_experts,
                " slots, the layer ", num_expert_slots(config));
  }
  torch::serialize::InputArchive forecast = read_archive_nested(archive, "forecast", what);
  balancer::ExpertLoadForecaster restored(forecaster_.num_layers(), forecaster_.num_experts(),
                                          options_.predictor, options_.accuracy_horizon_steps);
  load_forecaster(restored, forecast, what + "/forecast");
  const int64_t observed_steps = read_archive_value(archive, "observed_steps", what).toInt();
  const int64_t steps_since_decision =
      read_archive_value(archive, "steps_since_decision", what).toInt();
  const double step_seconds_sum = read_archive_value(archive, "step_seconds_sum", what).toDouble();

  for (size_t l = 0; l < layers_.size(); ++l) layers_[l]->restore_placement(placements[l]);
  forecaster_ = std::move(restored);
  observed_steps_ = observed_steps;
  steps_since_decision_ = steps_since_decision;
  step_seconds_sum_ = step_seconds_sum;
}

}  // namespace moescope::runtime
