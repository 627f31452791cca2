#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "moescope/balancer/load_predictor.h"

namespace moescope::balancer {

namespace {

double max_over_mean(std::span<const double> values) {
  double total = 0.0;
  double largest = 0.0;
  for (double value : values) {
    total += value;
    largest = std::max(largest, value);
  }
  return total > 0.0 ? largest * static_cast<double>(values.size()) / total : 1.0;
}

void check_size(std::span<const double> values, int num_experts, const char* what) {
  if (values.size() != static_cast<size_t>(num_experts)) {
    throw std::invalid_argument(std::string("prediction accuracy: ") + what + " has " +
                                std::to_string(values.size()) + " entries, expected " +
                                std::to_string(num_experts) + " (num_experts)");
  }
}

}  // namespace

PredictionAccuracy score_prediction(std::span<const double> predicted,
                                    std::span<const double> actual) {
  if (predicted.size() != actual.size() || actual.empty()) {
    throw std::invalid_argument(
        "score_prediction: predicted has " + std::to_string(predicted.size()) +
        " experts, actual " + std::to_string(actual.size()) + "; both must match and be non-empty");
  }
  double actual_total = 0.0;
  double absolute_error_total = 0.0;
  double max_absolute_error = 0.0;
  double percentage_error_sum = 0.0;
  size_t loaded_experts = 0;
  for (size_t expert = 0; expert < actual.size(); ++expert) {
    const double error = std::abs(predicted[expert] - actual[expert]);
    actual_total += actual[expert];
    absolute_error_total += error;
    max_absolute_error = std::max(max_absolute_error, error);
    if (actual[expert] > 0.0) {
      percentage_error_sum += error / actual[expert];
      ++loaded_experts;
    }
  }
  if (!(actual_total > 0.0)) {
    throw std::invalid_argument("score_prediction: the actual load is zero for every expert");
  }
  PredictionAccuracy accuracy;
  accuracy.mean_absolute_percentage_error =
      percentage_error_sum / static_cast<double>(loaded_experts);
  accuracy.weighted_absolute_percentage_error = absolute_error_total / actual_total;
  accuracy.max_error_over_mean_load =
      max_absolute_error * static_cast<double>(actual.size()) / actual_total;
  accuracy.predicted_imbalance = max_over_mean(predicted);
  accuracy.actual_imbalance = max_over_mean(actual);
  return accuracy;
}

PredictionAccuracyTracker::PredictionAccuracyTracker(int num_experts, int horizon_steps)
    : num_experts_(num_experts), horizon_steps_(horizon_steps) {
  if (num_experts <= 0) {
    throw std::invalid_argument("prediction accuracy: num_experts must be positive, got " +
                                std::to_string(num_experts));
  }
  if (horizon_steps <= 0) {
    throw std::invalid_argument("prediction accuracy: horizon_steps must be positive, got " +
                                std::to_string(horizon_steps));
  }
  window_prediction_.assign(static_cast<size_t>(num_experts), 0.0);
  window_actual_sum_.assign(static_cast<size_t>(num_experts), 0.0);
}

std::optional<PredictionAccuracy> PredictionAccuracyTracker::record(
    std::span<const double> prediction_before_step, std::span<const double> actual) {
  check_size(prediction_before_step, num_experts_, "prediction_before_step");
  check_size(actual, num_experts_, "actual");
  if (steps_in_window_ == 0) {
    std::copy(prediction_before_step.begin(), prediction_before_step.end(),
              window_prediction_.begin());
    std::fill(window_actual_sum_.begin(), window_actual_sum_.end(), 0.0);
  }
  for (size_t expert = 0; expert < actual.size(); ++expert) {
    window_actual_sum_[expert] += actual[expert];
  }
  if (++steps_in_window_ < horizon_steps_) return std::nullopt;

  steps_in_window_ = 0;
  double actual_total = 0.0;
  for (double& sum : window_actual_sum_) {
    sum /= horizon_steps_;  // now the mean per step
    actual_total += sum;
  }
  if (!(actual_total > 0.0)) return std::nullopt;

  if (std::any_of(window_prediction_.begin(), window_prediction_.end(),
                  [](double value) { return value != 0.0; })) {
    std::vector<double>& error = recent_errors_.emplace_back(window_actual_sum_);
    for (size_t expert = 0; expert < error.size(); ++expert)
      error[expert] -= window_prediction_[expert];
    if (recent_errors_.size() > kRecentWindowErrors) recent_errors_.erase(recent_errors_.begin());
  }
  const PredictionAccuracy accuracy = score_prediction(window_prediction_, window_actual_sum_);
  sum_.mean_absolute_percentage_error += accuracy.mean_absolute_percentage_error;
  sum_.weighted_absolute_percentage_error += accuracy.weighted_absolute_percentage_error;
  sum_.max_error_over_mean_load += accuracy.max_error_over_mean_load;
  sum_.predicted_imbalance += accuracy.predicted_imbalance;
  sum_.actual_imbalance += accuracy.actual_imbalance;
  ++num_windows_scored_;
  latest_ = accuracy;
  return accuracy;
}

std::optional<PredictionAccuracy> PredictionAccuracyTracker::mean() const {
  if (num_windows_scored_ == 0) return std::nullopt;
  const double n = static_cast<double>(num_windows_scored_);
  PredictionAccuracy mean;
  mean.mean_absolute_percentage_error = sum_.mean_absolute_percentage_error / n;
  mean.weighted_absolute_percentage_error = sum_.weighted_absolute_percentage_error / n;
  mean.max_error_over_mean_load = sum_.max_error_over_mean_load / n;
  mean.predicted_imbalance = sum_.predicted_imbalance / n;
  mean.actual_imbalance = sum_.actual_imbalance / n;
  return mean;
}

PredictionAccuracyTrackerState PredictionAccuracyTracker::state() const {
  PredictionAccuracyTrackerState state;
  state.num_experts = num_experts_;
  state.horizon_steps = horizon_steps_;
  state.window_prediction = window_prediction_;
  state.window_actual_sum = window_actual_sum_;
  state.steps_in_window = steps_in_window_;
  state.num_windows_scored = num_windows_scored_;
  state.sum = sum_;
  state.latest = latest_;
  state.recent_errors = recent_errors_;
  return state;
}

void PredictionAccuracyTracker::load_state(const PredictionAccuracyTrackerState& state) {
  if (state.num_experts != num_experts_ || state.horizon_steps != horizon_steps_) {
    throw std::invalid_argument(
        "prediction accuracy: the state is of " + std::to_string(state.num_experts) +
        " experts and a " + std::to_string(state.horizon_steps) + "-step horizon, this tracker " +
        std::to_string(num_experts_) + " and " + std::to_string(horizon_steps_));
  }
  check_size(state.window_prediction, num_experts_, "state.window_prediction");
  check_size(state.window_actual_sum, num_experts_, "state.window_actual_sum");
  if (state.steps_in_window < 0 || state.steps_in_window >= horizon_steps_ ||
      state.num_windows_scored < 0) {
    throw std::invalid_argument("prediction accuracy: the state's window position " +
                                std::to_string(state.steps_in_window) + " or its " +
                                std::to_string(state.num_windows_scored) +
                                " scored windows do not fit a " + std::to_string(horizon_steps_) +
                                "-step horizon");
  }
  if (state.recent_errors.size() > kRecentWindowErrors) {
    throw std::invalid_argument(
        "prediction accuracy: the state holds " + std::to_string(state.recent_errors.size()) +
        " window errors, at most " + std::to_string(kRecentWindowErrors) + " are kept");
  }
  for (const std::vector<double>& error : state.recent_errors) {
    check_size(error, num_experts_, "state.recent_errors");
  }
  window_prediction_ = state.window_prediction;
  window_actual_sum_ = state.window_actual_sum;
  recent_errors_ = state.recent_errors;
  steps_in_window_ = state.steps_in_window;
  num_windows_scored_ = state.num_windows_scored;
  sum_ = state.sum;
  latest_ = state.latest;
}

}  // namespace moescope::balancer
