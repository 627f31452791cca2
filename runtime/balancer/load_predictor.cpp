#include "moescope/runtime/load_predictor.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace moescope::runtime {

LoadPredictor::LoadPredictor(int num_experts) : num_experts_(num_experts) {
  if (num_experts <= 0) {
    throw std::invalid_argument("load predictor: num_experts must be positive, got " +
                                std::to_string(num_experts));
  }
}

void LoadPredictor::observe(std::span<const double> tokens_per_expert) {
  if (tokens_per_expert.size() != static_cast<size_t>(num_experts_)) {
    throw std::invalid_argument(
        "load predictor: tokens_per_expert has " + std::to_string(tokens_per_expert.size()) +
        " entries, the predictor has " + std::to_string(num_experts_) + " experts");
  }
  for (size_t expert = 0; expert < tokens_per_expert.size(); ++expert) {
    const double tokens = tokens_per_expert[expert];
    if (!std::isfinite(tokens) || tokens < 0.0) {
      throw std::invalid_argument("load predictor: tokens_per_expert[" + std::to_string(expert) +
                                  "] is " + std::to_string(tokens) +
                                  "; counts must be finite and non-negative");
    }
  }
  observe_checked(tokens_per_expert);
  ++num_observed_steps_;
}

EmaLoadPredictor::EmaLoadPredictor(int num_experts, double alpha)
    : LoadPredictor(num_experts), alpha_(alpha), average_(static_cast<size_t>(num_experts), 0.0) {
  if (!(alpha > 0.0 && alpha <= 1.0)) {
    throw std::invalid_argument("EMA load predictor: ema_alpha must be in (0, 1], got " +
                                std::to_string(alpha));
  }
}

std::string EmaLoadPredictor::name() const {
  std::ostringstream out;
  out << "ema(alpha=" << alpha_ << ")";
  return out.str();
}

void EmaLoadPredictor::observe_checked(std::span<const double> tokens_per_expert) {
  if (num_observed_steps() == 0) {
    average_.assign(tokens_per_expert.begin(), tokens_per_expert.end());
    return;
  }
  for (size_t expert = 0; expert < average_.size(); ++expert) {
    average_[expert] += alpha_ * (tokens_per_expert[expert] - average_[expert]);
  }
}

WindowLoadPredictor::WindowLoadPredictor(int num_experts, int window_steps)
    : LoadPredictor(num_experts), window_steps_(window_steps) {
  if (window_steps <= 0) {
    throw std::invalid_argument("window load predictor: window_steps must be positive, got " +
                                std::to_string(window_steps));
  }
  history_.assign(static_cast<size_t>(window_steps) * num_experts, 0.0);
  sum_.assign(static_cast<size_t>(num_experts), 0.0);
}

std::string WindowLoadPredictor::name() const {
  return "window(steps=" + std::to_string(window_steps_) + ")";
}

void WindowLoadPredictor::observe_checked(std::span<const double> tokens_per_expert) {
  double* row = history_.data() + static_cast<size_t>(next_row_) * sum_.size();
  const bool ring_full = filled_ == window_steps_;
  for (size_t expert = 0; expert < sum_.size(); ++expert) {
    if (ring_full) sum_[expert] -= row[expert];
    row[expert] = tokens_per_expert[expert];
    sum_[expert] += row[expert];
  }
  if (!ring_full) ++filled_;
  next_row_ = (next_row_ + 1) % window_steps_;
  // A running sum drifts by rounding; recompute it once per trip around the ring.
  if (next_row_ == 0) {
    std::fill(sum_.begin(), sum_.end(), 0.0);
    for (int64_t r = 0; r < filled_; ++r) {
      const double* past = history_.data() + static_cast<size_t>(r) * sum_.size();
      for (size_t expert = 0; expert < sum_.size(); ++expert) sum_[expert] += past[expert];
    }
  }
}

std::vector<double> WindowLoadPredictor::predict() const {
  std::vector<double> mean(sum_.size(), 0.0);
  if (filled_ == 0) return mean;
  for (size_t expert = 0; expert < sum_.size(); ++expert) {
    mean[expert] = sum_[expert] / static_cast<double>(filled_);
  }
  return mean;
}

std::unique_ptr<LoadPredictor> make_load_predictor(const LoadPredictorConfig& config,
                                                   int num_experts) {
  switch (config.kind) {
    case LoadPredictorConfig::Kind::kEma:
      return std::make_unique<EmaLoadPredictor>(num_experts, config.ema_alpha);
    case LoadPredictorConfig::Kind::kWindow:
      return std::make_unique<WindowLoadPredictor>(num_experts, config.window_steps);
  }
  throw std::invalid_argument("make_load_predictor: unknown predictor kind");
}

ExpertLoadForecaster::ExpertLoadForecaster(int num_layers, int num_experts,
                                           const LoadPredictorConfig& config,
                                           int accuracy_horizon_steps)
    : num_experts_(num_experts) {
  if (num_layers <= 0) {
    throw std::invalid_argument("expert load forecaster: num_layers must be positive, got " +
                                std::to_string(num_layers));
  }
  predictors_.reserve(static_cast<size_t>(num_layers));
  trackers_.reserve(static_cast<size_t>(num_layers));
  for (int layer = 0; layer < num_layers; ++layer) {
    predictors_.push_back(make_load_predictor(config, num_experts));
    trackers_.emplace_back(num_experts, accuracy_horizon_steps);
  }
}

void ExpertLoadForecaster::check_layer(int layer) const {
  if (layer < 0 || layer >= num_layers()) {
    throw std::invalid_argument("expert load forecaster: layer " + std::to_string(layer) +
                                " out of range [0, " + std::to_string(num_layers()) + ")");
  }
}

std::optional<PredictionAccuracy> ExpertLoadForecaster::observe(
    int layer, std::span<const double> tokens_per_expert) {
  check_layer(layer);
  LoadPredictor& predictor = *predictors_[static_cast<size_t>(layer)];
  // Before the first step there is no forecast worth scoring.
  const bool has_forecast = predictor.num_observed_steps() > 0;
  std::vector<double> forecast_before_step;
  if (has_forecast) forecast_before_step = predictor.predict();
  predictor.observe(tokens_per_expert);  // validates the counts
  if (!has_forecast) return std::nullopt;
  return trackers_[static_cast<size_t>(layer)].record(forecast_before_step, tokens_per_expert);
}

std::vector<double> ExpertLoadForecaster::predict(int layer) const {
  check_layer(layer);
  return predictors_[static_cast<size_t>(layer)]->predict();
}

ExpertLoads ExpertLoadForecaster::predict_all() const {
  ExpertLoads loads;
  loads.num_layers = num_layers();
  loads.num_experts = num_experts_;
  loads.values.reserve(static_cast<size_t>(loads.num_layers) * num_experts_);
  for (const auto& predictor : predictors_) {
    const std::vector<double> forecast = predictor->predict();
    loads.values.insert(loads.values.end(), forecast.begin(), forecast.end());
  }
  return loads;
}

const PredictionAccuracyTracker& ExpertLoadForecaster::accuracy(int layer) const {
  check_layer(layer);
  return trackers_[static_cast<size_t>(layer)];
}

const LoadPredictor& ExpertLoadForecaster::predictor(int layer) const {
  check_layer(layer);
  return *predictors_[static_cast<size_t>(layer)];
}

}  // namespace moescope::runtime
