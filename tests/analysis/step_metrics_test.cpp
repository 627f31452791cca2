// The per-step metric set (step_metrics.h) finds each planted problem at every step, agrees
// with the report's per-layer numbers, stays within its documented series bound for a
// 48-layer x 128-expert model, and the TensorBoard framing's CRC is the standard CRC-32C.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/statistics.h"
#include "moescope/analysis/step_metrics.h"
#include "moescope/analysis/tensorboard_events.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::SyntheticOptions;

TraceModel load_synthetic(const std::string& name, const SyntheticOptions& options) {
  TraceModel model =
      load_traces(testing::write_synthetic_run(testing::test_directory(name), "run", options));
  EXPECT_TRUE(model.errors.empty());
  return model;
}

// name -> value of one step.
std::map<std::string, double> values_of(const StepMetrics& step) {
  std::map<std::string, double> values;
  for (const MetricValue& value : step.values) values[value.name] = value.value;
  return values;
}

TEST(StepMetrics, HotExpertShowsInItsLayerAndTheAcrossLayerMaximumAtEveryStep) {
  SyntheticOptions options;
  options.hot_layer = 1;
  options.hot_expert = 3;
  options.hot_factor = 4.0;
  TraceModel model = load_synthetic("step_metrics_hot", options);
  std::vector<StepMetrics> steps = compute_step_metrics(model);
  ASSERT_EQ(steps.size(), size_t(options.num_steps));
  ExpertLoadAnalysis report = analyze_expert_load(model);
  ASSERT_EQ(report.layers.size(), 2u);
  for (size_t i = 0; i < steps.size(); ++i) {
    auto values = values_of(steps[i]);
    EXPECT_EQ(steps[i].step, int64_t(i));
    // 4 x 256 tokens against 7 x 256 + 4 x 256 over 8 experts: 2.9, jitter of 10 tokens aside.
    EXPECT_NEAR(values.at("moescope/layer1/max_over_mean"), 1024.0 / (11 * 256 / 8.0), 0.15);
    EXPECT_LT(values.at("moescope/layer0/max_over_mean"), 1.1);
    EXPECT_EQ(values.at("moescope/layer1/hot_experts"), 1.0);
    EXPECT_EQ(values.at("moescope/layer0/hot_experts"), 0.0);
    EXPECT_DOUBLE_EQ(values.at("moescope/max_over_mean/max"),
                     values.at("moescope/layer1/max_over_mean"));
    // The report's per-step series is the same number.
    EXPECT_DOUBLE_EQ(values.at("moescope/layer1/max_over_mean"),
                     report.layers[1].max_over_mean_by_step[i]);
    EXPECT_LT(values.at("moescope/layer1/effective_experts"),
              values.at("moescope/layer0/effective_experts"));
    EXPECT_GT(values.at("moescope/step_time_ms/mean"), 0.0);
    EXPECT_EQ(values.count("moescope/layer0/dropped_tokens"), 0u) << "nothing was dropped";
  }
}

TEST(StepMetrics, SlowRankIsTheStragglerAndDeadExpertsAreCounted) {
  SyntheticOptions options;
  options.slow_rank = 1;
  options.slow_factor = 1.6;
  options.dead_layer = 0;
  options.dead_experts = {5, 6};
  options.drop_layer = 1;
  options.drop_fraction = 0.1;
  TraceModel model = load_synthetic("step_metrics_slow", options);
  std::vector<StepMetrics> steps = compute_step_metrics(model);
  ASSERT_EQ(steps.size(), size_t(options.num_steps));
  for (const StepMetrics& step : steps) {
    auto values = values_of(step);
    EXPECT_EQ(values.at("moescope/slowest_rank"), 1.0) << "step " << step.step;
    // Rank 1's expert compute is 1.6x: 2 layers x 2 ms x 0.6 = 2.4 ms more busy time.
    EXPECT_GT(values.at("moescope/straggler_excess_ms"), 1.5) << "step " << step.step;
    EXPECT_GE(values.at("moescope/step_time_ms/max"), values.at("moescope/step_time_ms/mean"));
    EXPECT_EQ(values.at("moescope/layer0/dead_experts"), 2.0);
    EXPECT_EQ(values.at("moescope/layer1/dead_experts"), 0.0);
    EXPECT_EQ(values.at("moescope/dead_experts"), 2.0);
    EXPECT_GT(values.at("moescope/layer1/dropped_tokens"), 0.0);
    EXPECT_EQ(values.at("moescope/layer0/dropped_tokens"), 0.0);
    EXPECT_GT(values.at("moescope/peak_memory_bytes"), 0.0) << "activations are allocated";
  }
}

TEST(StepMetrics, SeriesOfA48LayerBy128ExpertModelStayWithinTheBound) {
  SyntheticOptions options;
  options.num_ranks = 2;
  options.num_steps = 2;
  options.num_layers = 48;
  options.num_experts = 128;
  options.tokens_per_expert = 8;
  options.expert_ms = 0.05;
  options.route_ms = 0.01;
  options.a2a_ms = 0.01;
  TraceModel model = load_synthetic("step_metrics_48x128", options);
  std::vector<uint32_t> experts(48, 128);
  std::vector<StepMetrics> steps = compute_step_metrics(model);
  ASSERT_EQ(steps.size(), 2u);
  const size_t series = count_series(steps);
  EXPECT_LE(series, metric_series_bound(experts));
  EXPECT_LE(series, 500u);
  EXPECT_GE(series, 48u * 7u) << "every layer has its series";

  MetricOptions detail;
  detail.per_expert_shares = true;
  const size_t detailed = count_series(compute_step_metrics(model, detail));
  EXPECT_EQ(detailed, series + 48u * 128u);
  EXPECT_LE(detailed, metric_series_bound(experts, detail));
}

TEST(StepMetrics, LayerMetricsOfOneStepFromTokens) {
  std::vector<MetricValue> out;
  const std::vector<double> tokens = {6, 2, 0, 0};  // mean 2
  append_layer_metrics(7, tokens, -1, {}, out);
  std::map<std::string, double> values;
  for (const MetricValue& value : out) values[value.name] = value.value;
  EXPECT_EQ(values.size(), 7u);
  EXPECT_DOUBLE_EQ(values.at("moescope/layer7/max_over_mean"), 3.0);
  EXPECT_DOUBLE_EQ(values.at("moescope/layer7/min_over_mean"), 0.0);
  EXPECT_DOUBLE_EQ(values.at("moescope/layer7/dead_experts"), 2.0);
  EXPECT_DOUBLE_EQ(values.at("moescope/layer7/hot_experts"), 1.0);  // 0.75 > 2 / 4
  EXPECT_DOUBLE_EQ(values.at("moescope/layer7/tokens"), 8.0);
  // std of {6, 2, 0, 0} = sqrt((16 + 0 + 4 + 4) / 4) = sqrt(6)
  EXPECT_NEAR(values.at("moescope/layer7/cv"), std::sqrt(6.0) / 2.0, 1e-12);
}

// The expert-load statistics `top`, `metrics` and the report share (statistics.h).
TEST(ExpertLoadStatistics, HotMeansMoreThanTwiceAnEvenShareDeadMeansNoToken) {
  EXPECT_EQ(hot_experts(std::vector<double>{6, 2, 0, 0}), std::vector<size_t>{0});
  // Exactly twice an even share (4 of 8 tokens over 4 experts) is not hot; just above is.
  EXPECT_TRUE(hot_experts(std::vector<double>{4, 2, 1, 1}).empty());
  EXPECT_EQ(hot_experts(std::vector<double>{4.01, 2, 1, 1}), std::vector<size_t>{0});
  EXPECT_EQ(hot_experts(std::vector<double>{0, 5, 0, 5, 0, 0}), (std::vector<size_t>{1, 3}));
  EXPECT_TRUE(hot_experts(std::vector<double>{0, 0, 0}).empty());  // no token: nothing is hot
  EXPECT_FALSE(is_hot_share(1.0, 0));
  EXPECT_EQ(count_dead_experts(std::vector<double>{6, 2, 0, 0}), 2u);
  EXPECT_EQ(count_dead_experts(std::vector<double>{}), 0u);
  EXPECT_DOUBLE_EQ(mean(std::vector<double>{6, 2, 0, 0}), 2.0);
  EXPECT_DOUBLE_EQ(standard_deviation(std::vector<double>{6, 2, 0, 0}), std::sqrt(6.0));
  EXPECT_EQ(mean(std::vector<double>{}), 0.0);
  EXPECT_EQ(standard_deviation(std::vector<double>{}), 0.0);
}

// The real two-rank moe_train trace (tests/data/moe_train_2ranks/README.md): expert
// parallelism with a receive cap that drops tokens and a skewed layer 1.
TEST(StepMetrics, RealTwoRankRuntimeTraceHasEveryKindOfSeries) {
  const std::string data = std::string(MOESCOPE_ANALYSIS_TEST_DIR) + "/../data/moe_train_2ranks/";
  TraceModel model = load_traces({data + "run.0.moetrace", data + "run.1.moetrace"});
  ASSERT_TRUE(model.errors.empty());
  std::vector<StepMetrics> steps = compute_step_metrics(model);
  ASSERT_EQ(steps.size(), 8u);
  size_t with_drops = 0;
  for (const StepMetrics& step : steps) {
    auto values = values_of(step);
    // --skew-layer 1: layer 1 saturates at once (top-2 of 4 experts: max/mean 2); layer 0
    // drifts there over the run.
    EXPECT_DOUBLE_EQ(values.at("moescope/layer1/max_over_mean"), 2.0) << "step " << step.step;
    if (step.step == 0) {
      EXPECT_LT(values.at("moescope/layer0/max_over_mean"), 1.5);
    }
    EXPECT_GE(values.at("moescope/layer1/rank_max_over_mean"), 1.0);
    EXPECT_TRUE(values.count("moescope/straggler_excess_ms"));
    EXPECT_TRUE(values.count("moescope/peak_memory_bytes"));
    EXPECT_GT(values.at("moescope/exposed_comm_ms"), 0.0) << "Gloo all-to-alls on the CPU";
    with_drops += values.at("moescope/dropped_tokens") > 0 ? 1 : 0;
  }
  EXPECT_GT(with_drops, 0u) << "--receive-cap 64 drops tokens";
  std::vector<uint32_t> experts = {4, 4};
  EXPECT_LE(count_series(steps), metric_series_bound(experts));
}

TEST(TensorBoardEvents, Crc32cIsTheCastagnoliCheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(TensorBoardEvents, AnUnwritableDirectoryIsAClearError) {
  TensorBoardEventWriter writer("/proc/moescope-cannot-be-here/tb");
  EXPECT_FALSE(writer.ok());
  EXPECT_NE(writer.error().find("/proc/moescope-cannot-be-here"), std::string::npos)
      << writer.error();
}

}  // namespace
}  // namespace moescope::analysis
