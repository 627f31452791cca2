#include "cold_expert_offload.h"

#include <c10/util/Exception.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "moescope/runtime/state_archive.h"

namespace moe_train {

using moescope::runtime::ExpertOptimizerOffload;

namespace {

int num_experts_of(const std::vector<moescope::runtime::MoELayer>& layers) {
  TORCH_CHECK(!layers.empty(), "ColdExpertOffload: no MoE layers given");
  return static_cast<int>(layers.front()->config().num_experts);
}

// How far back the forecast's accuracy is scored; only the predictions drive the offload.
constexpr int kAccuracyHorizonSteps = 10;

}  // namespace

ColdExpertOffload::ColdExpertOffload(std::vector<moescope::runtime::MoELayer> layers,
                                     const moescope::runtime::ExpertOptimizerOptions& options,
                                     int64_t interval)
    : layers_(std::move(layers)),
      interval_(interval),
      forecaster_(static_cast<int>(layers_.size()), num_experts_of(layers_),
                  moescope::balancer::LoadPredictorConfig{}, kAccuracyHorizonSteps) {
  TORCH_CHECK(interval_ > 0, "ColdExpertOffload: interval must be > 0, got ", interval_);
  for (auto& layer : layers_) {
    TORCH_CHECK(layer->config().num_redundant_experts == 0,
                "ColdExpertOffload: layers with redundant expert slots are not supported");
    std::vector<at::Tensor> stacked{layer->experts->w_gate_up, layer->experts->w_down};
    for (const auto& parameter : stacked)
      expert_parameters_.insert(parameter.unsafeGetTensorImpl());
    TORCH_CHECK(layer->config().num_experts == layers_.front()->config().num_experts,
                "ColdExpertOffload: the MoE layers have different expert counts");
    offloads_.push_back(std::make_unique<ExpertOptimizerOffload>(stacked, options));
  }
}

void ColdExpertOffload::set_lr(double lr) {
  for (auto& offload : offloads_) offload->set_lr(lr);
}

void ColdExpertOffload::step() {
  for (auto& offload : offloads_) offload->step();
}

void ColdExpertOffload::zero_grad() {
  for (auto& offload : offloads_) offload->zero_grad();
}

std::vector<LayerOffloadReport> ColdExpertOffload::after_step(
    int64_t step, const std::vector<std::vector<double>>& tokens) {
  TORCH_CHECK(tokens.size() == layers_.size(), "ColdExpertOffload::after_step: tokens has ",
              tokens.size(), " layers, the model ", layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) forecaster_.observe(static_cast<int>(l), tokens[l]);
  if ((step + 1) % interval_ != 0) return {};

  std::vector<LayerOffloadReport> reports;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::vector<double> forecast = forecaster_.predict(static_cast<int>(l));  // [E]
    const auto first = static_cast<size_t>(layers_[l]->first_local_expert());
    const auto count = static_cast<size_t>(layers_[l]->num_local_experts());
    ExpertOptimizerOffload& offload = *offloads_[l];
    const moescope::runtime::OffloadDecision decision =
        offload.update_from_predicted_load(std::span<const double>(forecast).subspan(first, count));
    LayerOffloadReport report;
    report.layer = static_cast<int64_t>(l);
    report.offloaded = decision.offloaded;
    report.prefetched = decision.prefetched;
    report.on_host = offload.offloaded_experts();
    report.host_state_bytes = offload.offloaded_state_bytes();
    report.device_state_bytes = offload.resident_state_bytes();
    reports.push_back(std::move(report));
  }
  return reports;
}

std::vector<const ExpertOptimizerOffload*> ColdExpertOffload::expert_optimizers() const {
  std::vector<const ExpertOptimizerOffload*> optimizers;
  for (const auto& offload : offloads_) optimizers.push_back(offload.get());
  return optimizers;
}

int64_t ColdExpertOffload::offloaded_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& offload : offloads_) bytes += offload->offloaded_state_bytes();
  return bytes;
}

int64_t ColdExpertOffload::resident_state_bytes() const {
  int64_t bytes = 0;
  for (const auto& offload : offloads_) bytes += offload->resident_state_bytes();
  return bytes;
}

void ColdExpertOffload::save(torch::serialize::OutputArchive& archive) const {
  archive.write("num_layers", c10::IValue(static_cast<int64_t>(offloads_.size())));
  for (size_t l = 0; l < offloads_.size(); ++l) {
    torch::serialize::OutputArchive layer;
    offloads_[l]->save(layer);
    archive.write("layer" + std::to_string(l), layer);
  }
  torch::serialize::OutputArchive forecast;
  moescope::runtime::save_forecaster(forecaster_, forecast);
  archive.write("forecast", forecast);
}

void ColdExpertOffload::load(torch::serialize::InputArchive& archive, const std::string& what) {
  const int64_t num_layers =
      moescope::runtime::read_archive_value(archive, "num_layers", what).toInt();
  TORCH_CHECK(num_layers == static_cast<int64_t>(offloads_.size()), what, ": saved for ",
              num_layers, " MoE layers, the model has ", offloads_.size());
  for (size_t l = 0; l < offloads_.size(); ++l) {
    const std::string key = "layer" + std::to_string(l);
    torch::serialize::InputArchive layer =
        moescope::runtime::read_archive_nested(archive, key, what);
    offloads_[l]->load(layer, what + "/" + key);
  }
  torch::serialize::InputArchive forecast =
      moescope::runtime::read_archive_nested(archive, "forecast", what);
  moescope::runtime::load_forecaster(forecaster_, forecast, what + "/forecast");
}

}  // namespace moe_train
