// Expert load prediction: forecasts the tokens each expert of a layer will receive in the next
// steps from what it received in past steps, and scores the forecasts against what then
// happened. The placement planner plans on the predictions; the runtime records the predictions
// (moescope_expert_values with MOESCOPE_QUANTITY_PREDICTED_LOAD) and the accuracy in the trace.
//
// Plain C++ (no torch). Loads are tokens per expert per step: [num_experts].
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {

/// What a load predictor has learned, as plain numbers, for checkpoints. Only a predictor with
/// the same name() and expert count takes it back (LoadPredictor::load_state).
struct LoadPredictorState {
  std::string name;  // LoadPredictor::name(), e.g. "ema(alpha=0.1)"
  int num_experts = 0;
  int64_t num_observed_steps = 0;
  /// EMA: the average [num_experts]. Window: the ring [window_steps, num_experts], then the
  /// sum of the steps in it [num_experts].
  std::vector<double> values;
  /// Window: {steps in the ring, next row}. EMA: empty.
  std::vector<int64_t> positions;
};

/// One layer's load forecaster. Subclasses define how history becomes a prediction.
class LoadPredictor {
 public:
  explicit LoadPredictor(int num_experts);
  virtual ~LoadPredictor() = default;
  LoadPredictor(const LoadPredictor&) = delete;
  LoadPredictor& operator=(const LoadPredictor&) = delete;

  int num_experts() const { return num_experts_; }
  int64_t num_observed_steps() const { return num_observed_steps_; }

  /// Feeds one step's tokens per expert: [num_experts], finite and non-negative. Throws
  /// std::invalid_argument naming the expert otherwise.
  void observe(std::span<const double> tokens_per_expert);
  /// Predicted tokens per expert per step for the coming steps: [num_experts]. All zeros before
  /// the first observation.
  virtual std::vector<double> predict() const = 0;
  /// e.g. "ema(alpha=0.1)", "window(steps=32)".
  virtual std::string name() const = 0;

  /// Everything observed so far, for a checkpoint.
  LoadPredictorState state() const;
  /// Continues from `state` as if this predictor had observed what the saved one did. Throws
  /// std::invalid_argument naming the mismatch (name, expert count, sizes, a value that is not
  /// finite and non-negative); the predictor is unchanged then.
  void load_state(const LoadPredictorState& state);

 protected:
  virtual void observe_checked(std::span<const double> tokens_per_expert) = 0;
  /// Fill / read the subclass's part of the state (values, positions). read_state() validates
  /// before it changes anything.
  virtual void write_state(LoadPredictorState& state) const = 0;
  virtual void read_state(const LoadPredictorState& state) = 0;

 private:
  int num_experts_;
  int64_t num_observed_steps_ = 0;
};

/// Exponential moving average: p <- alpha * x + (1 - alpha) * p; the first step sets p = x, so
/// the forecast carries no bias toward zero. alpha in (0, 1]; larger follows drift faster.
class EmaLoadPredictor final : public LoadPredictor {
 public:
  EmaLoadPredictor(int num_experts, double alpha);
  std::vector<double> predict() const override { return average_; }
  std::string name() const override;
  double alpha() const { return alpha_; }

 private:
  void observe_checked(std::span<const double> tokens_per_expert) override;
  void write_state(LoadPredictorState& state) const override;
  void read_state(const LoadPredictorState& state) override;
  double alpha_;
  std::vector<double> average_;  // [num_experts]
};

/// Mean over the last `window_steps` steps (fewer while the history is shorter).
class WindowLoadPredictor final : public LoadPredictor {
 public:
  WindowLoadPredictor(int num_experts, int window_steps);
  std::vector<double> predict() const override;
  std::string name() const override;
  int window_steps() const { return window_steps_; }

 private:
  void observe_checked(std::span<const double> tokens_per_expert) override;
  void write_state(LoadPredictorState& state) const override;
  void read_state(const LoadPredictorState& state) override;
  int window_steps_;
  std::vector<double> history_;  // ring buffer [window_steps, num_experts]
  std::vector<double> sum_;      // [num_experts], sum of the steps in the ring
  int64_t filled_ = 0;
  int64_t next_row_ = 0;
};

struct LoadPredictorConfig {
  enum class Kind { kEma, kWindow };
  Kind kind = Kind::kEma;
  double ema_alpha = 0.1;
  int window_steps = 32;
};

/// Throws std::invalid_argument naming ema_alpha / window_steps / num_experts when out of range.
std::unique_ptr<LoadPredictor> make_load_predictor(const LoadPredictorConfig& config,
                                                   int num_experts);

/// How far one forecast was from the mean load actually seen over the window that followed it.
/// P = predicted tokens per expert per step, A = actual mean tokens per expert per step.
struct PredictionAccuracy {
  /// mean over experts with A_i > 0 of |P_i - A_i| / A_i (experts that got nothing are left out)
  double mean_absolute_percentage_error = 0.0;
  /// sum |P_i - A_i| / sum A_i; when P and A have the same total, twice the share of tokens
  /// the forecast put on the wrong experts
  double weighted_absolute_percentage_error = 0.0;
  /// max_i |P_i - A_i| / mean(A): the worst single-expert miss relative to an average expert
  double max_error_over_mean_load = 0.0;
  /// max(P)/mean(P) and max(A)/mean(A): the imbalance the planner was told and the real one
  double predicted_imbalance = 1.0;
  double actual_imbalance = 1.0;
};

/// What a PredictionAccuracyTracker has accumulated, for checkpoints.
struct PredictionAccuracyTrackerState {
  int num_experts = 0;
  int horizon_steps = 0;
  std::vector<double> window_prediction;  // [num_experts]
  std::vector<double> window_actual_sum;  // [num_experts]
  int steps_in_window = 0;
  int64_t num_windows_scored = 0;
  PredictionAccuracy sum{0, 0, 0, 0, 0};  // of every scored window
  std::optional<PredictionAccuracy> latest;
  std::vector<std::vector<double>> recent_errors;  // [<= kRecentWindowErrors][num_experts]
};

/// Window errors a tracker keeps for planning over the forecast's uncertainty
/// (next_window_placement.h: one load scenario per error).
inline constexpr size_t kRecentWindowErrors = 4;

/// Scores consecutive, non-overlapping windows of `horizon_steps` steps: at a window's first
/// step it keeps the prediction made before that step, sums the actual loads over the window
/// and, when the window is full, compares their per-step mean with the prediction. Windows in
/// which no expert received a token are not scored (every relative error would be 0/0).
class PredictionAccuracyTracker {
 public:
  PredictionAccuracyTracker(int num_experts, int horizon_steps);

  /// Call once per step. `prediction_before_step` is the forecast made before this step's counts
  /// were seen ([num_experts], used only when a window opens); `actual`: [num_experts].
  /// Returns the score when this step completes a window.
  std::optional<PredictionAccuracy> record(std::span<const double> prediction_before_step,
                                           std::span<const double> actual);

  int horizon_steps() const { return horizon_steps_; }
  int64_t num_windows_scored() const { return num_windows_scored_; }
  /// The latest score (nullopt before the first completed window).
  const std::optional<PredictionAccuracy>& latest() const { return latest_; }
  /// Mean of every field over all scored windows (nullopt before the first).
  std::optional<PredictionAccuracy> mean() const;
  /// The errors of the last kRecentWindowErrors scored windows, oldest first: the window's mean
  /// load minus the prediction made before it, [num_experts] each. A window whose prediction
  /// was all zero (made before anything was observed) leaves none.
  const std::vector<std::vector<double>>& recent_errors() const { return recent_errors_; }

  /// The open window and the scores so far, for a checkpoint.
  PredictionAccuracyTrackerState state() const;
  /// Continues from `state`. Throws std::invalid_argument naming the mismatch (expert count,
  /// horizon, sizes, a window position outside [0, horizon_steps)); unchanged then.
  void load_state(const PredictionAccuracyTrackerState& state);

 private:
  int num_experts_;
  int horizon_steps_;
  std::vector<double> window_prediction_;  // [num_experts]
  std::vector<double> window_actual_sum_;  // [num_experts]
  int steps_in_window_ = 0;                // 0: no window open
  int64_t num_windows_scored_ = 0;
  PredictionAccuracy sum_{0, 0, 0, 0, 0};
  std::optional<PredictionAccuracy> latest_;
  std::vector<std::vector<double>> recent_errors_;
};

/// Scores prediction P against actual mean load A, both [num_experts]. Requires sum(A) > 0.
PredictionAccuracy score_prediction(std::span<const double> predicted,
                                    std::span<const double> actual);

/// One layer of an ExpertLoadForecaster, for checkpoints.
struct LayerForecastState {
  LoadPredictorState predictor;
  PredictionAccuracyTrackerState accuracy;
};

/// A model's forecasts: one predictor and one accuracy tracker per MoE layer.
class ExpertLoadForecaster {
 public:
  ExpertLoadForecaster(int num_layers, int num_experts, const LoadPredictorConfig& config,
                       int accuracy_horizon_steps);

  int num_layers() const { return static_cast<int>(predictors_.size()); }
  int num_experts() const { return num_experts_; }

  /// Feeds one layer's tokens per expert for one step ([num_experts]): scores the running
  /// window against the forecast made before this step, then updates the predictor. Returns the
  /// window's score when this step completed one.
  std::optional<PredictionAccuracy> observe(int layer, std::span<const double> tokens_per_expert);
  /// The layer's forecast: [num_experts].
  std::vector<double> predict(int layer) const;
  /// Every layer's forecast, ready for plan_expert_placement: [num_layers, num_experts].
  ExpertLoads predict_all() const;
  const PredictionAccuracyTracker& accuracy(int layer) const;
  const LoadPredictor& predictor(int layer) const;

  /// Every layer's predictor and tracker: [num_layers].
  std::vector<LayerForecastState> state() const;
  /// Continues from `state` ([num_layers]). Throws std::invalid_argument naming the layer and
  /// the mismatch; the layers before it are then already restored.
  void load_state(const std::vector<LayerForecastState>& state);

 private:
  void check_layer(int layer) const;
  int num_experts_;
  std::vector<std::unique_ptr<LoadPredictor>> predictors_;
  std::vector<PredictionAccuracyTracker> trackers_;
};

}  // namespace moescope::balancer
