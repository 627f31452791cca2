// Load predictors (EMA, sliding window), their accuracy scoring and the per-model forecaster.
#include "moescope/balancer/load_predictor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace moescope::balancer {
namespace {

TEST(EmaLoadPredictor, FirstStepIsTakenAsIsThenBlendsWithAlpha) {
  EmaLoadPredictor predictor(2, 0.25);
  EXPECT_EQ(predictor.predict(), (std::vector<double>{0.0, 0.0}));
  predictor.observe(std::vector<double>{100.0, 0.0});
  EXPECT_EQ(predictor.predict(), (std::vector<double>{100.0, 0.0}));
  predictor.observe(std::vector<double>{0.0, 40.0});
  // 0.25 * x + 0.75 * previous
  EXPECT_DOUBLE_EQ(predictor.predict()[0], 75.0);
  EXPECT_DOUBLE_EQ(predictor.predict()[1], 10.0);
  predictor.observe(std::vector<double>{20.0, 40.0});
  EXPECT_DOUBLE_EQ(predictor.predict()[0], 0.25 * 20.0 + 0.75 * 75.0);
  EXPECT_DOUBLE_EQ(predictor.predict()[1], 0.25 * 40.0 + 0.75 * 10.0);
  EXPECT_EQ(predictor.num_observed_steps(), 3);
  EXPECT_EQ(predictor.name(), "ema(alpha=0.25)");
}

TEST(EmaLoadPredictor, ConvergesToAConstantLoad) {
  EmaLoadPredictor predictor(1, 0.1);
  predictor.observe(std::vector<double>{0.0});
  for (int step = 0; step < 300; ++step) predictor.observe(std::vector<double>{50.0});
  EXPECT_NEAR(predictor.predict()[0], 50.0, 50.0 * std::pow(0.9, 300) + 1e-9);
}

TEST(WindowLoadPredictor, AveragesTheLastStepsOnly) {
  WindowLoadPredictor predictor(2, 3);
  predictor.observe(std::vector<double>{3.0, 30.0});
  EXPECT_EQ(predictor.predict(), (std::vector<double>{3.0, 30.0}));
  predictor.observe(std::vector<double>{6.0, 0.0});
  EXPECT_EQ(predictor.predict(), (std::vector<double>{4.5, 15.0}));
  predictor.observe(std::vector<double>{9.0, 0.0});
  EXPECT_EQ(predictor.predict(), (std::vector<double>{6.0, 10.0}));
  predictor.observe(std::vector<double>{12.0, 0.0});  // the first step leaves the window
  EXPECT_EQ(predictor.predict(), (std::vector<double>{9.0, 0.0}));
  for (int step = 0; step < 100; ++step) {
    predictor.observe(std::vector<double>{static_cast<double>(step), 1.0});
  }
  EXPECT_DOUBLE_EQ(predictor.predict()[0], (97.0 + 98.0 + 99.0) / 3.0);
  EXPECT_DOUBLE_EQ(predictor.predict()[1], 1.0);
  EXPECT_EQ(predictor.name(), "window(steps=3)");
}

TEST(LoadPredictor, FactoryBuildsTheConfiguredKindAndRejectsBadParameters) {
  LoadPredictorConfig config;
  config.kind = LoadPredictorConfig::Kind::kWindow;
  config.window_steps = 8;
  EXPECT_EQ(make_load_predictor(config, 4)->name(), "window(steps=8)");
  config.kind = LoadPredictorConfig::Kind::kEma;
  config.ema_alpha = 0.5;
  EXPECT_EQ(make_load_predictor(config, 4)->name(), "ema(alpha=0.5)");

  auto expect_error = [](auto&& make, const std::string& text) {
    try {
      make();
      ADD_FAILURE() << "no error; expected '" << text << "'";
    } catch (const std::invalid_argument& error) {
      EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    }
  };
  expect_error([] { EmaLoadPredictor(4, 0.0); }, "ema_alpha must be in (0, 1]");
  expect_error([] { EmaLoadPredictor(4, 1.5); }, "ema_alpha must be in (0, 1]");
  expect_error([] { WindowLoadPredictor(4, 0); }, "window_steps must be positive");
  expect_error([] { EmaLoadPredictor(0, 0.5); }, "num_experts must be positive");
  EmaLoadPredictor predictor(3, 0.5);
  expect_error(
      [&] {
        predictor.observe(std::vector<double>{1.0, 2.0});
      },
      "tokens_per_expert has 2 entries, the predictor has 3 experts");
  expect_error(
      [&] {
        predictor.observe(std::vector<double>{1.0, -2.0, 0.0});
      },
      "tokens_per_expert[1] is -2");
  expect_error(
      [&] {
        predictor.observe(std::vector<double>{std::numeric_limits<double>::quiet_NaN(), 0, 0});
      },
      "tokens_per_expert[0]");
  EXPECT_EQ(predictor.num_observed_steps(), 0) << "rejected steps must not count";
}

TEST(PredictionAccuracy, ScoresAgainstTheActualLoad) {
  // P = {10, 30, 0, 20}, A = {20, 30, 10, 0}: errors 10, 0, 10, 20.
  const PredictionAccuracy accuracy =
      score_prediction(std::vector<double>{10, 30, 0, 20}, std::vector<double>{20, 30, 10, 0});
  // Relative errors over loaded experts only: 0.5, 0, 1.
  EXPECT_DOUBLE_EQ(accuracy.mean_absolute_percentage_error, 1.5 / 3.0);
  EXPECT_DOUBLE_EQ(accuracy.weighted_absolute_percentage_error, 40.0 / 60.0);
  EXPECT_DOUBLE_EQ(accuracy.max_error_over_mean_load, 20.0 / 15.0);
  EXPECT_DOUBLE_EQ(accuracy.predicted_imbalance, 30.0 / 15.0);
  EXPECT_DOUBLE_EQ(accuracy.actual_imbalance, 30.0 / 15.0);

  const PredictionAccuracy perfect =
      score_prediction(std::vector<double>{5, 15}, std::vector<double>{5, 15});
  EXPECT_EQ(perfect.mean_absolute_percentage_error, 0.0);
  EXPECT_EQ(perfect.weighted_absolute_percentage_error, 0.0);
  EXPECT_EQ(perfect.max_error_over_mean_load, 0.0);
  EXPECT_DOUBLE_EQ(perfect.actual_imbalance, 1.5);
  EXPECT_THROW(score_prediction(std::vector<double>{1.0}, std::vector<double>{0.0}),
               std::invalid_argument);
}

TEST(PredictionAccuracyTracker, ComparesThePredictionWithTheNextWindowsMean) {
  PredictionAccuracyTracker tracker(2, 3);
  // The prediction given at the window's first step is the one scored; later ones are ignored.
  EXPECT_FALSE(tracker.record(std::vector<double>{10, 10}, std::vector<double>{6, 12}));
  EXPECT_FALSE(tracker.record(std::vector<double>{99, 99}, std::vector<double>{9, 12}));
  const auto first = tracker.record(std::vector<double>{99, 99}, std::vector<double>{12, 12});
  ASSERT_TRUE(first.has_value());
  // Actual mean {9, 12}; errors 1 and 2.
  EXPECT_DOUBLE_EQ(first->mean_absolute_percentage_error, (1.0 / 9.0 + 2.0 / 12.0) / 2.0);
  EXPECT_DOUBLE_EQ(first->weighted_absolute_percentage_error, 3.0 / 21.0);
  EXPECT_DOUBLE_EQ(first->max_error_over_mean_load, 2.0 / 10.5);
  EXPECT_EQ(tracker.num_windows_scored(), 1);

  // Second window: exact prediction.
  EXPECT_FALSE(tracker.record(std::vector<double>{4, 8}, std::vector<double>{4, 8}));
  EXPECT_FALSE(tracker.record(std::vector<double>{0, 0}, std::vector<double>{2, 8}));
  const auto second = tracker.record(std::vector<double>{0, 0}, std::vector<double>{6, 8});
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->weighted_absolute_percentage_error, 0.0);
  ASSERT_TRUE(tracker.mean().has_value());
  EXPECT_DOUBLE_EQ(tracker.mean()->weighted_absolute_percentage_error, 3.0 / 21.0 / 2.0);

  // A window without a single token is not scored.
  for (int step = 0; step < 3; ++step) {
    EXPECT_FALSE(tracker.record(std::vector<double>{1, 1}, std::vector<double>{0, 0}));
  }
  EXPECT_EQ(tracker.num_windows_scored(), 2);
  EXPECT_THROW(tracker.record(std::vector<double>{1}, std::vector<double>{1, 2}),
               std::invalid_argument);
}

// The errors the next-window planner weighs: each scored window's mean minus the prediction
// made before it, the last kRecentWindowErrors kept, none from a window predicted before any
// data (all zero); they survive a state round trip and a bad state is refused.
TEST(PredictionAccuracyTracker, KeepsTheLastWindowErrors) {
  PredictionAccuracyTracker tracker(2, 2);
  tracker.record(std::vector<double>{0, 0}, std::vector<double>{4, 2});  // nothing observed yet
  tracker.record(std::vector<double>{0, 0}, std::vector<double>{4, 2});
  EXPECT_TRUE(tracker.recent_errors().empty());
  for (int window = 0; window < 6; ++window) {
    const double w = window;
    tracker.record(std::vector<double>{10, 10}, std::vector<double>{10 + w, 9});
    tracker.record(std::vector<double>{99, 99}, std::vector<double>{12 + w, 9});
  }
  ASSERT_EQ(tracker.recent_errors().size(), kRecentWindowErrors);
  // Oldest kept: window 2, mean {13, 9} - {10, 10}; newest: window 5.
  EXPECT_EQ(tracker.recent_errors().front(), (std::vector<double>{3, -1}));
  EXPECT_EQ(tracker.recent_errors().back(), (std::vector<double>{6, -1}));

  PredictionAccuracyTracker restored(2, 2);
  restored.load_state(tracker.state());
  EXPECT_EQ(restored.recent_errors(), tracker.recent_errors());
  PredictionAccuracyTrackerState bad = tracker.state();
  bad.recent_errors.push_back({1, 2});
  EXPECT_THROW(restored.load_state(bad), std::invalid_argument);
  bad = tracker.state();
  bad.recent_errors.back() = {1, 2, 3};
  EXPECT_THROW(restored.load_state(bad), std::invalid_argument);
}

TEST(ExpertLoadForecaster, TracksEachLayerAndScoresItsForecasts) {
  LoadPredictorConfig config;
  config.kind = LoadPredictorConfig::Kind::kWindow;
  config.window_steps = 4;
  ExpertLoadForecaster forecaster(2, 2, config, 2);
  // Layer 0 is steady; layer 1 flips its hot expert every step, which a 4-step window smooths
  // to an even forecast that is wrong by half the load every step.
  for (int step = 0; step < 9; ++step) {
    forecaster.observe(0, std::vector<double>{30.0, 10.0});
    if (step % 2 == 0) {
      forecaster.observe(1, std::vector<double>{40.0, 0.0});
    } else {
      forecaster.observe(1, std::vector<double>{0.0, 40.0});
    }
  }
  EXPECT_EQ(forecaster.predict(0), (std::vector<double>{30.0, 10.0}));
  const ExpertLoads all = forecaster.predict_all();
  EXPECT_EQ(all.num_layers, 2);
  EXPECT_EQ(all.num_experts, 2);
  EXPECT_EQ(all.values.size(), 4u);
  EXPECT_EQ(all.values[0], 30.0);
  // The first step has no forecast; 8 scored steps make 4 windows of 2.
  EXPECT_EQ(forecaster.accuracy(0).num_windows_scored(), 4);
  EXPECT_EQ(forecaster.accuracy(0).mean()->weighted_absolute_percentage_error, 0.0);
  EXPECT_EQ(forecaster.accuracy(1).num_windows_scored(), 4);
  // Layer 1's windows all have the actual mean {20, 20}. Forecasts: before step 1 {40, 0}
  // (WAPE 1), before step 3 the mean of 3 steps {80/3, 40/3} (WAPE 1/3), then {20, 20} twice.
  const PredictionAccuracyTracker& flipping = forecaster.accuracy(1);
  EXPECT_DOUBLE_EQ(flipping.mean()->weighted_absolute_percentage_error, (1.0 + 1.0 / 3.0) / 4.0);
  EXPECT_DOUBLE_EQ(flipping.mean()->predicted_imbalance,
                   (2.0 + (80.0 / 3.0) / 20.0 + 1.0 + 1.0) / 4.0);
  EXPECT_EQ(flipping.latest()->weighted_absolute_percentage_error, 0.0);
  EXPECT_DOUBLE_EQ(flipping.latest()->actual_imbalance, 1.0);
  EXPECT_THROW(forecaster.observe(2, std::vector<double>{1, 1}), std::invalid_argument);
  EXPECT_EQ(forecaster.predictor(1).name(), "window(steps=4)");
}

// Loads with some structure per expert and step, so a predictor that lost part of its history
// predicts something else.
std::vector<double> loads_of_step(int step, int num_experts) {
  std::vector<double> loads;
  for (int expert = 0; expert < num_experts; ++expert) {
    loads.push_back(static_cast<double>((step * 7 + expert * 13) % 29 + expert));
  }
  return loads;
}

// A predictor restored from another's state predicts what that one predicts, now and after
// the same further steps (the window's ring position comes back too, so old steps leave the
// window at the same time).
TEST(LoadPredictorState, RestoredPredictorContinuesLikeTheSavedOne) {
  for (const LoadPredictorConfig::Kind kind :
       {LoadPredictorConfig::Kind::kEma, LoadPredictorConfig::Kind::kWindow}) {
    LoadPredictorConfig config;
    config.kind = kind;
    config.window_steps = 4;
    const auto saved = make_load_predictor(config, 3);
    for (int step = 0; step < 6; ++step) saved->observe(loads_of_step(step, 3));
    const auto restored = make_load_predictor(config, 3);
    restored->load_state(saved->state());
    SCOPED_TRACE(saved->name());
    EXPECT_EQ(restored->num_observed_steps(), 6);
    EXPECT_EQ(restored->predict(), saved->predict());
    // A fresh predictor fed the same steps differs while the saved history still counts.
    const auto fresh = make_load_predictor(config, 3);
    for (int step = 6; step < 11; ++step) {
      saved->observe(loads_of_step(step, 3));
      restored->observe(loads_of_step(step, 3));
      fresh->observe(loads_of_step(step, 3));
      EXPECT_EQ(restored->predict(), saved->predict()) << "step " << step;
      if (step < 8) {
        EXPECT_NE(fresh->predict(), saved->predict()) << "step " << step;
      }
    }
  }
}

TEST(LoadPredictorState, RefusesTheStateOfAnotherPredictorAndLeavesItUnchanged) {
  EmaLoadPredictor ema(3, 0.1);
  ema.observe(std::vector<double>{1.0, 2.0, 3.0});
  WindowLoadPredictor window(3, 4);
  EXPECT_THROW(window.load_state(ema.state()), std::invalid_argument);
  EXPECT_THROW(EmaLoadPredictor(3, 0.2).load_state(ema.state()), std::invalid_argument);
  EXPECT_THROW(EmaLoadPredictor(4, 0.1).load_state(ema.state()), std::invalid_argument);
  LoadPredictorState bad = ema.state();
  bad.values[1] = -1.0;
  EmaLoadPredictor target(3, 0.1);
  try {
    target.load_state(bad);
    FAIL() << "a negative load was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("values[1]"), std::string::npos) << error.what();
  }
  EXPECT_EQ(target.num_observed_steps(), 0);
  EXPECT_EQ(target.predict(), (std::vector<double>{0.0, 0.0, 0.0}));
  LoadPredictorState ring = window.state();
  ring.positions = {2, 3};  // a half-filled ring must continue right after its last row
  EXPECT_THROW(window.load_state(ring), std::invalid_argument);
}

// The forecaster's state holds the accuracy windows too: a restored forecaster scores the
// window that was open at the save like the saved one does.
TEST(LoadPredictorState, RestoredForecasterScoresTheOpenWindow) {
  ExpertLoadForecaster saved(2, 3, LoadPredictorConfig{}, 4);
  for (int step = 0; step < 6; ++step) {
    for (int layer = 0; layer < 2; ++layer) saved.observe(layer, loads_of_step(step + layer, 3));
  }
  ExpertLoadForecaster restored(2, 3, LoadPredictorConfig{}, 4);
  restored.load_state(saved.state());
  for (int step = 6; step < 9; ++step) {
    for (int layer = 0; layer < 2; ++layer) {
      const auto expected = saved.observe(layer, loads_of_step(step + layer, 3));
      const auto got = restored.observe(layer, loads_of_step(step + layer, 3));
      ASSERT_EQ(got.has_value(), expected.has_value()) << "step " << step << " layer " << layer;
      if (expected) {
        EXPECT_EQ(got->weighted_absolute_percentage_error,
                  expected->weighted_absolute_percentage_error);
      }
      EXPECT_EQ(restored.predict(layer), saved.predict(layer));
    }
  }
  EXPECT_EQ(restored.accuracy(1).num_windows_scored(), saved.accuracy(1).num_windows_scored());
  EXPECT_GE(saved.accuracy(1).num_windows_scored(), 2);  // one before the save, one after
  EXPECT_THROW(ExpertLoadForecaster(3, 3, LoadPredictorConfig{}, 4).load_state(saved.state()),
               std::invalid_argument);
  EXPECT_THROW(ExpertLoadForecaster(2, 3, LoadPredictorConfig{}, 5).load_state(saved.state()),
               std::invalid_argument);
}

}  // namespace
}  // namespace moescope::balancer
