#include "moescope/balancer/load_predictor.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace moescope::balancer {

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

namespace {

void check_loads(const std::vector<double>& values, const std::string& what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i]) || values[i] < 0.0) {
      throw std::invalid_argument(what + "[" + std::to_string(i) + "] is " +
                                  std::to_string(values[i]) +
                                  "; loads must be finite and non-negative");
    }
  }
}

}  // namespace

LoadPredictorState LoadPredictor::state() const {
  LoadPredictorState state;
  state.name = name();
  state.num_experts = num_experts_;
  state.num_observed_steps = num_observed_steps_;
  write_state(state);
  return state;
}

void LoadPredictor::load_state(const LoadPredictorState& state) {
  if (state.name != name() || state.num_experts != num_experts_) {
    throw std::invalid_argument("load predictor: the state is of " + state.name + " over " +
                                std::to_string(state.num_experts) + " experts, this predictor " +
                                name() + " over " + std::to_string(num_experts_));
  }
  if (state.num_observed_steps < 0) {
    throw std::invalid_argument("load predictor: the state has " +
                                std::to_string(state.num_observed_steps) + " observed steps");
  }
  check_loads(state.values, "load predictor: state values");
  read_state(state);
  num_observed_steps_ = state.num_observed_steps;
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

void EmaLoadPredictor::write_state(LoadPredictorState& state) const {
  state.values = average_;
}

void EmaLoadPredictor::read_state(const LoadPredictorState& state) {
  if (state.values.size() != average_.size() || !state.positions.empty()) {
    throw std::invalid_argument("EMA load predictor: the state has " +
                                std::to_string(state.values.size()) + " values and " +
                                std::to_string(state.positions.size()) + " positions, expected " +
                                std::to_string(average_.size()) + " and 0");
  }
  average_ = state.values;
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

void WindowLoadPredictor::write_state(LoadPredictorState& state) const {
  state.values = history_;
  state.values.insert(state.values.end(), sum_.begin(), sum_.end());
  state.positions = {filled_, next_row_};
}

void WindowLoadPredictor::read_state(const LoadPredictorState& state) {
  if (state.values.size() != history_.size() + sum_.size() || state.positions.size() != 2) {
    throw std::invalid_argument("window load predictor: the state has " +
                                std::to_string(state.values.size()) + " values and " +
                                std::to_string(state.positions.size()) + " positions, expected " +
                                std::to_string(history_.size() + sum_.size()) + " and 2");
  }
  const int64_t filled = state.positions[0], next_row = state.positions[1];
  if (filled < 0 || filled > window_steps_ || next_row < 0 || next_row >= window_steps_ ||
      (filled < window_steps_ && next_row != filled)) {
    throw std::invalid_argument("window load predictor: the state's ring position (" +
                                std::to_string(filled) + " steps, next row " +
                                std::to_string(next_row) + ") does not fit a window of " +
                                std::to_string(window_steps_) + " steps");
  }
  const auto ring_end = state.values.begin() + static_cast<std::ptrdiff_t>(history_.size());
  history_.assign(state.values.begin(), ring_end);
  sum_.assign(ring_end, state.values.end());
  filled_ = filled;
  next_row_ = next_row;
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

std::vector<LayerForecastState> ExpertLoadForecaster::state() const {
  std::vector<LayerForecastState> state;
  for (size_t layer = 0; layer < predictors_.size(); ++layer) {
    state.push_back({predictors_[layer]->state(), trackers_[layer].state()});
  }
  return state;
}

void ExpertLoadForecaster::load_state(const std::vector<LayerForecastState>& state) {
  if (state.size() != predictors_.size()) {
    throw std::invalid_argument("expert load forecaster: the state has " +
                                std::to_string(state.size()) + " layers, the forecaster " +
                                std::to_string(predictors_.size()));
  }
  for (size_t layer = 0; layer < state.size(); ++layer) {
    try {
      predictors_[layer]->load_state(state[layer].predictor);
      trackers_[layer].load_state(state[layer].accuracy);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument("expert load forecaster: layer " + std::to_string(layer) + ": " +
                                  error.what());
    }
  }
}

}  // namespace moescope::balancer
