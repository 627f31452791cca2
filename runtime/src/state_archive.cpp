#include "moescope/runtime/state_archive.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace moescope::runtime {
namespace {

std::vector<double> accuracy_fields(const balancer::PredictionAccuracy& accuracy) {
  return {accuracy.mean_absolute_percentage_error, accuracy.weighted_absolute_percentage_error,
          accuracy.max_error_over_mean_load, accuracy.predicted_imbalance,
          accuracy.actual_imbalance};
}

balancer::PredictionAccuracy accuracy_from(const std::vector<double>& fields) {
  return {fields.at(0), fields.at(1), fields.at(2), fields.at(3), fields.at(4)};
}

at::Tensor tensor_of(const std::vector<double>& values) {
  return at::tensor(values, at::kDouble);
}

at::Tensor tensor_of(const std::vector<int64_t>& values) {
  return at::tensor(values, at::kLong);
}

// A checkpoint may be loaded onto a CUDA device: bring the numbers back to the host.
template <typename T>
std::vector<T> values_of(const at::Tensor& tensor, at::ScalarType dtype, const std::string& what) {
  TORCH_CHECK(tensor.dim() == 1 && tensor.scalar_type() == dtype, what, ": expected a 1-d ", dtype,
              " tensor, got ", tensor.sizes(), " ", tensor.scalar_type());
  const at::Tensor host = tensor.to(at::kCPU).contiguous();
  const T* first = host.data_ptr<T>();
  return std::vector<T>(first, first + host.numel());
}

}  // namespace

c10::IValue read_archive_value(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& what) {
  c10::IValue value;
  TORCH_CHECK(archive.try_read(key, value), what, ": no entry ", key);
  return value;
}

at::Tensor read_archive_tensor(torch::serialize::InputArchive& archive, const std::string& key,
                               const std::string& what) {
  at::Tensor tensor;
  TORCH_CHECK(archive.try_read(key, tensor), what, ": no entry ", key);
  return tensor;
}

torch::serialize::InputArchive read_archive_nested(torch::serialize::InputArchive& archive,
                                                   const std::string& key,
                                                   const std::string& what) {
  torch::serialize::InputArchive nested;
  TORCH_CHECK(archive.try_read(key, nested), what, ": no entry ", key);
  return nested;
}

void save_forecaster(const balancer::ExpertLoadForecaster& forecaster,
                     torch::serialize::OutputArchive& archive) {
  const std::vector<balancer::LayerForecastState> layers = forecaster.state();
  archive.write("num_layers", c10::IValue(static_cast<int64_t>(layers.size())));
  for (size_t l = 0; l < layers.size(); ++l) {
    const balancer::LoadPredictorState& predictor = layers[l].predictor;
    const balancer::PredictionAccuracyTrackerState& accuracy = layers[l].accuracy;
    torch::serialize::OutputArchive layer;
    layer.write("predictor_name", c10::IValue(predictor.name));
    layer.write("num_experts", c10::IValue(static_cast<int64_t>(predictor.num_experts)));
    layer.write("num_observed_steps", c10::IValue(predictor.num_observed_steps));
    layer.write("values", tensor_of(predictor.values));
    layer.write("positions", tensor_of(predictor.positions));
    layer.write("horizon_steps", c10::IValue(static_cast<int64_t>(accuracy.horizon_steps)));
    layer.write("steps_in_window", c10::IValue(static_cast<int64_t>(accuracy.steps_in_window)));
    layer.write("num_windows_scored", c10::IValue(accuracy.num_windows_scored));
    layer.write("window_prediction", tensor_of(accuracy.window_prediction));
    layer.write("window_actual_sum", tensor_of(accuracy.window_actual_sum));
    layer.write("accuracy_sum", tensor_of(accuracy_fields(accuracy.sum)));
    layer.write("accuracy_latest", tensor_of(accuracy.latest ? accuracy_fields(*accuracy.latest)
                                                             : std::vector<double>{}));
    std::vector<double> errors;  // [windows x experts], row after row
    for (const std::vector<double>& error : accuracy.recent_errors) {
      errors.insert(errors.end(), error.begin(), error.end());
    }
    layer.write("recent_errors", tensor_of(errors));
    archive.write("layer" + std::to_string(l), layer);
  }
}

void load_forecaster(balancer::ExpertLoadForecaster& forecaster,
                     torch::serialize::InputArchive& archive, const std::string& what) {
  const int64_t num_layers = read_archive_value(archive, "num_layers", what).toInt();
  TORCH_CHECK(num_layers == forecaster.num_layers(), what, ": the saved forecast has ", num_layers,
              " layers, this run's ", forecaster.num_layers());
  std::vector<balancer::LayerForecastState> layers(static_cast<size_t>(num_layers));
  for (int64_t l = 0; l < num_layers; ++l) {
    const std::string key = "layer" + std::to_string(l);
    torch::serialize::InputArchive layer = read_archive_nested(archive, key, what);
    const std::string where = what + "/" + key;
    balancer::LoadPredictorState& predictor = layers[static_cast<size_t>(l)].predictor;
    balancer::PredictionAccuracyTrackerState& accuracy = layers[static_cast<size_t>(l)].accuracy;
    predictor.name = read_archive_value(layer, "predictor_name", where).toStringRef();
    predictor.num_experts =
        static_cast<int>(read_archive_value(layer, "num_experts", where).toInt());
    predictor.num_observed_steps = read_archive_value(layer, "num_observed_steps", where).toInt();
    predictor.values =
        values_of<double>(read_archive_tensor(layer, "values", where), at::kDouble, where);
    predictor.positions =
        values_of<int64_t>(read_archive_tensor(layer, "positions", where), at::kLong, where);
    accuracy.num_experts = predictor.num_experts;
    accuracy.horizon_steps =
        static_cast<int>(read_archive_value(layer, "horizon_steps", where).toInt());
    accuracy.steps_in_window =
        static_cast<int>(read_archive_value(layer, "steps_in_window", where).toInt());
    accuracy.num_windows_scored = read_archive_value(layer, "num_windows_scored", where).toInt();
    accuracy.window_prediction = values_of<double>(
        read_archive_tensor(layer, "window_prediction", where), at::kDouble, where);
    accuracy.window_actual_sum = values_of<double>(
        read_archive_tensor(layer, "window_actual_sum", where), at::kDouble, where);
    const std::vector<double> sum =
        values_of<double>(read_archive_tensor(layer, "accuracy_sum", where), at::kDouble, where);
    const std::vector<double> latest =
        values_of<double>(read_archive_tensor(layer, "accuracy_latest", where), at::kDouble, where);
    TORCH_CHECK(sum.size() == 5 && (latest.empty() || latest.size() == 5), where,
                ": accuracy_sum/accuracy_latest must hold the 5 PredictionAccuracy fields");
    accuracy.sum = accuracy_from(sum);
    if (!latest.empty()) accuracy.latest = accuracy_from(latest);
    // Checkpoints written before the errors were kept have none: the next windows refill them.
    at::Tensor saved_errors;
    if (layer.try_read("recent_errors", saved_errors)) {
      const std::vector<double> errors = values_of<double>(saved_errors, at::kDouble, where);
      const auto experts = static_cast<size_t>(std::max(predictor.num_experts, 1));
      TORCH_CHECK(errors.size() % experts == 0, where, ": recent_errors holds ", errors.size(),
                  " values, not a whole number of windows of ", experts, " experts");
      for (size_t first = 0; first < errors.size(); first += experts) {
        accuracy.recent_errors.emplace_back(errors.begin() + first,
                                            errors.begin() + first + experts);
      }
    }
  }
  try {
    forecaster.load_state(layers);
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, what, ": ", error.what());
  }
}

}  // namespace moescope::runtime
