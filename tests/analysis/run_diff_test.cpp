// `moescope diff`'s analysis: the interval arithmetic, a planted difference found exactly (sign
// and size), no difference between runs that differ only by noise (false-positive rate over
// seeded pairs), and the placement prediction's cost model against a run built from it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "diff_run_writer.h"
#include "moescope/analysis/difference_interval.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::DiffRunOptions;

TraceModel load_run(const std::string& directory, const std::string& stem,
                    const DiffRunOptions& options) {
  TraceModel model = load_traces(testing::write_diff_run(directory, stem, options));
  EXPECT_TRUE(model.errors.empty());
  EXPECT_EQ(model.processes.size(), size_t(options.num_ranks));
  return model;
}

const DiffRow* find_row(const RunDiff& diff, const std::string& section, const std::string& name) {
  for (const DiffRow& row : diff.rows) {
    if (row.section == section && row.name == name) return &row;
  }
  return nullptr;
}

std::set<std::string> significant_rows(const RunDiff& diff) {
  std::set<std::string> rows;
  for (const DiffRow& row : diff.rows) {
    if (row.interval.significant) rows.insert(row.section + "/" + row.name);
  }
  return rows;
}

TEST(DifferenceInterval, StudentTQuantilesMatchTables) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.7062, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.2281, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.995, 30), 2.7500, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.975, 1e7), 1.95996, 1e-4);
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.2281, 1e-4);
  EXPECT_NEAR(student_t_cdf(2.2281389, 10), 0.975, 1e-6);
  // Fractional degrees of freedom (Welch): values from numerical integration of the t density
  // (mpmath, 30 digits).
  EXPECT_NEAR(student_t_quantile(0.975, 7.5), 2.33303962686, 1e-8);
  EXPECT_NEAR(student_t_quantile(0.9995, 3.3), 11.1066951899, 1e-6);
}

TEST(DifferenceInterval, BatchMeansAndWelch) {
  // Four steps, four batches: plain standard error s / sqrt(n).
  SampleMean plain = batch_mean({1, 2, 3, 4}, 10);
  EXPECT_EQ(plain.batches, 4u);
  EXPECT_DOUBLE_EQ(plain.mean, 2.5);
  EXPECT_NEAR(plain.standard_error, std::sqrt(5.0 / 3.0 / 4.0), 1e-12);
  // Eight steps in two batches of four: the batch means are 1.5 and 5.5.
  SampleMean batched = batch_mean({1, 2, 1, 2, 5, 6, 5, 6}, 2);
  EXPECT_EQ(batched.batches, 2u);
  EXPECT_NEAR(batched.standard_error, std::sqrt(8.0 / 1.0 / 2.0), 1e-12);
  // Equal variances and sizes: Welch's df is 2(n - 1).
  SampleMean a = batch_mean({1, 2, 3, 4}, 10), b = batch_mean({11, 12, 13, 14}, 10);
  DifferenceInterval interval = difference_interval(a, b, 0.05);
  EXPECT_NEAR(interval.degrees_of_freedom, 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(interval.difference, 10.0);
  const double half = student_t_quantile(0.975, 6.0) * std::sqrt(2 * 5.0 / 12.0);
  EXPECT_NEAR(interval.low, 10.0 - half, 1e-9);
  EXPECT_TRUE(interval.significant);
  // Deterministic numbers: equal is not a difference, unequal is.
  EXPECT_FALSE(difference_interval(batch_mean({4, 4, 4}), batch_mean({4, 4, 4}), 0.05).significant);
  EXPECT_TRUE(difference_interval(batch_mean({4, 4, 4}), batch_mean({5, 5, 5}), 0.05).significant);
  // One step: no interval.
  EXPECT_FALSE(difference_interval(batch_mean({4}), batch_mean({5, 6}), 0.05).known);
}

// A run-to-run term known beforehand: each side's variance gains its square, with no df of its
// own (normal quantiles when the runs themselves do not vary).
TEST(DifferenceInterval, RunToRunTermWidensTheIntervalAsAKnownVariance) {
  EXPECT_NEAR(student_t_quantile(0.975, 1e9), 1.959964, 1e-5);
  // Deterministic runs 1 ms apart: a point difference alone, an interval of +-1.96 sqrt(2) with
  // a run-to-run SD of 1 ms.
  const SampleMean four = batch_mean({4, 4, 4}), five = batch_mean({5, 5, 5});
  EXPECT_TRUE(difference_interval(four, five, 0.05).significant);
  DifferenceInterval between = difference_interval(four, five, 0.05, 1.0);
  EXPECT_FALSE(between.significant);
  EXPECT_NEAR(between.high - between.difference, 1.959964 * std::sqrt(2.0), 1e-5);
  // Noisy runs: variance se_a^2 + se_b^2 + 2 sd^2; Welch's df from the estimated parts only.
  const SampleMean a = batch_mean({1, 2, 3, 4}, 10), b = batch_mean({11, 12, 13, 14}, 10);
  const double se2 = 5.0 / 12.0;  // each side's squared standard error
  const double variance = 2 * se2 + 2 * 4.0;
  const DifferenceInterval wide = difference_interval(a, b, 0.05, 2.0);
  const double df = variance * variance / (2 * se2 * se2 / 3.0);
  EXPECT_NEAR(wide.degrees_of_freedom, df, 1e-9);
  EXPECT_NEAR(wide.high - wide.difference, student_t_quantile(0.975, df) * std::sqrt(variance),
              1e-9);
  EXPECT_TRUE(wide.significant) << "10 ms apart is beyond a 2 ms run-to-run SD";
}

// sigma_run from groups of recordings: the run means' pooled variance within their group minus
// the runs' own squared standard errors; a lone recording adds nothing.
TEST(DifferenceInterval, RunToRunEstimateFromGroupsOfRecordings) {
  auto run = [](double mean, double standard_error) {
    SampleMean sample;
    sample.steps = sample.batches = 10;
    sample.mean = mean;
    sample.standard_error = standard_error;
    return sample;
  };
  const RunToRunEstimate estimate = estimate_run_to_run(
      {{run(10, 0.5), run(12, 0.5)}, {run(20, 1.0), run(20, 1.0)}, {run(5, 3.0)}});
  EXPECT_EQ(estimate.runs, 4u);
  EXPECT_EQ(estimate.degrees_of_freedom, 2u);
  EXPECT_DOUBLE_EQ(estimate.between_variance, (1.0 + 1.0 + 0.0) / 2.0);
  EXPECT_DOUBLE_EQ(estimate.within_variance, (0.25 + 0.25 + 1.0 + 1.0) / 4.0);
  EXPECT_DOUBLE_EQ(estimate.sigma, std::sqrt(1.0 - 0.625));
  // Means closer than their own noise explains: no run-to-run term.
  EXPECT_DOUBLE_EQ(estimate_run_to_run({{run(10, 2.0), run(10.5, 2.0)}}).sigma, 0.0);
  EXPECT_EQ(estimate_run_to_run({{run(10, 0.5)}, {}}).degrees_of_freedom, 0u);
}

// Runs of the same program whose mean moves from run to run (each run's forward takes 3 ms +
// N(0, 1 ms) longer: where the job lands, slow spells): the step time row's interval from the
// steps inside each run calls most pairs different; with the run-to-run SD of 1 ms it holds at
// about its confidence. Measured: 25 of 30 pairs outside without, 0 of 30 with (bound 5).
TEST(RunDiff, RunToRunVariationIsCoveredWhenItsSizeIsGiven) {
  const std::string directory = testing::test_directory("run_diff_run_to_run");
  std::mt19937_64 generator(2026);
  std::normal_distribution<double> run_offset(3.0, 1.0);
  constexpr int kPairs = 30;
  int outside_without = 0, outside_with = 0;
  std::vector<std::vector<SampleMean>> pairs;  // each pair's two recordings: estimate sigma_run
  for (int pair = 0; pair < kPairs; ++pair) {
    DiffRunOptions base_options, next_options;
    base_options.seed = 5000 + 2 * pair;
    next_options.seed = 5001 + 2 * pair;
    base_options.forward_extra_ms = std::max(0.0, run_offset(generator));
    next_options.forward_extra_ms = std::max(0.0, run_offset(generator));
    const TraceModel base = load_run(directory, "base" + std::to_string(pair), base_options);
    const TraceModel next = load_run(directory, "next" + std::to_string(pair), next_options);
    DiffOptions options;
    const RunDiff within = diff_runs(base, next, options);
    options.run_to_run_ms = 1.0;
    const RunDiff between = diff_runs(base, next, options);
    const DiffRow* narrow = find_row(within, "step", "step time");
    const DiffRow* wide = find_row(between, "step", "step time");
    ASSERT_NE(narrow, nullptr);
    ASSERT_NE(wide, nullptr);
    EXPECT_DOUBLE_EQ(wide->run_to_run_sd, 1.0);
    EXPECT_DOUBLE_EQ(narrow->run_to_run_sd, 0.0);
    EXPECT_DOUBLE_EQ(wide->interval.difference, narrow->interval.difference);
    EXPECT_GT(wide->interval.high - wide->interval.low,
              narrow->interval.high - narrow->interval.low);
    // One row at 95%, as the prediction check takes it.
    auto outside = [](const DiffRow& row) {
      const DifferenceInterval at95 =
          difference_interval(row.base, row.next, 0.05, row.run_to_run_sd);
      return at95.significant;
    };
    outside_without += outside(*narrow);
    outside_with += outside(*wide);
    // Only the step time row takes the term.
    EXPECT_DOUBLE_EQ(find_row(between, "phase", "forward")->run_to_run_sd, 0.0);
    // A recording's step time alone is the diff's row.
    const SampleMean base_alone = run_step_time(base, options);
    EXPECT_DOUBLE_EQ(base_alone.mean, narrow->base.mean);
    EXPECT_DOUBLE_EQ(base_alone.standard_error, narrow->base.standard_error);
    pairs.push_back({base_alone, run_step_time(next, options)});
  }
  // The pairs measure the run-to-run SD that was planted (1 ms; 30 degrees of freedom).
  const RunToRunEstimate estimate = estimate_run_to_run(pairs);
  EXPECT_EQ(estimate.degrees_of_freedom, size_t(kPairs));
  EXPECT_NEAR(estimate.sigma, 1.0, 0.35);
  std::printf("sigma_run estimated from the pairs: %.2f ms (planted 1)\n", estimate.sigma);
  std::printf("outside the 95%% interval: %d of %d pairs without the run-to-run term, %d with\n",
              outside_without, kPairs, outside_with);
  EXPECT_GE(outside_without, kPairs / 2) << "the runs' own noise does not cover run-to-run";
  EXPECT_LE(outside_with, 5) << "of " << kPairs;
}

// Forward +2 ms, layer 1's expert 0 takes 80% of expert 1's tokens (same rank), the gradient
// all-reduce sends 1.5x the bytes: exactly these rows (and the step time and compute that the
// longer forward adds to) differ, with the planted signs and sizes.
TEST(RunDiff, FindsExactlyThePlantedDifferences) {
  const std::string directory = testing::test_directory("run_diff_planted");
  DiffRunOptions base_options;
  base_options.seed = 11;
  DiffRunOptions next_options = base_options;
  next_options.seed = 12;
  next_options.forward_extra_ms = 2.0;
  next_options.moved_layer = 1;
  next_options.moved_share = 0.8;
  next_options.allreduce_bytes = base_options.allreduce_bytes * 3 / 2;
  const TraceModel base = load_run(directory, "base", base_options);
  const TraceModel next = load_run(directory, "next", next_options);
  const RunDiff diff = diff_runs(base, next);

  EXPECT_EQ(
      significant_rows(diff),
      (std::set<std::string>{"step/step time", "step/compute", "phase/forward",
                             "collective/all_reduce bytes", "layer/layer 1 experts max/mean"}));
  for (const char* name : {"step time", "compute"}) {
    const DiffRow* row = find_row(diff, "step", name);
    ASSERT_NE(row, nullptr) << name;
    EXPECT_LE(row->interval.low, 2.0) << name;
    EXPECT_GE(row->interval.high, 2.0) << name;
    EXPECT_NEAR(row->interval.difference, 2.0, 0.5) << name;
  }
  const DiffRow* forward = find_row(diff, "phase", "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_NEAR(forward->interval.difference, 2.0, 0.3);
  EXPECT_LE(forward->interval.low, 2.0);
  EXPECT_GE(forward->interval.high, 2.0);
  const DiffRow* bytes = find_row(diff, "collective", "all_reduce bytes");
  ASSERT_NE(bytes, nullptr);
  EXPECT_DOUBLE_EQ(bytes->interval.difference, double(base_options.allreduce_bytes / 2));
  // Expert 0 holds 1.8x the mean (tokens move, the mean stays): max/mean ~1.03 -> ~1.8.
  const DiffRow* imbalance = find_row(diff, "layer", "layer 1 experts max/mean");
  ASSERT_NE(imbalance, nullptr);
  EXPECT_NEAR(imbalance->next.mean, 1.8, 0.03);
  EXPECT_NEAR(imbalance->interval.difference, 0.8 - (imbalance->base.mean - 1.0), 0.03);
  EXPECT_GT(imbalance->interval.low, 0.7);
  // The untouched layer and the rank load are inside the noise.
  EXPECT_FALSE(find_row(diff, "layer", "layer 0 experts max/mean")->interval.significant);
  EXPECT_FALSE(find_row(diff, "layer", "layer 1 ranks max/mean")->interval.significant);
  // Ranked: the time rows only, largest first; every one slower.
  ASSERT_EQ(diff.ranked.size(), 3u);
  for (size_t index : diff.ranked) EXPECT_EQ(diff.rows[index].unit, "ms");
  EXPECT_GT(diff.rows[diff.ranked[0]].interval.difference, 0);
  // The findings: layer 1's imbalance appeared (max/mean 1.8 >= 1.5), nothing disappeared.
  bool imbalance_appeared = false;
  for (const FindingChange& change : diff.findings) {
    EXPECT_NE(change.status, "disappeared") << change.kind << " " << change.where;
    if (change.kind == "expert_imbalance" && change.where == "all ranks, layer 1") {
      imbalance_appeared = change.status == "appeared";
    }
  }
  EXPECT_TRUE(imbalance_appeared);
  // JSON and text carry the same verdicts.
  const std::string text = render_diff(diff, DiffFormat::kText);
  EXPECT_NE(text.find("phase"), std::string::npos);
  EXPECT_NE(text.find("slower"), std::string::npos);
  EXPECT_NE(render_diff(diff, DiffFormat::kJson).find("\"significant\": 5"), std::string::npos);
}

// Same program, different seeds: 100 pairs, each with ~45 rows compared. With the intervals
// holding together at 95%, at most 5% of the pairs should show any difference; measured: 5 of
// 100. The bound of 10 fails a method whose rate doubled.
TEST(RunDiff, SeedsAloneAreNoise) {
  const std::string directory = testing::test_directory("run_diff_noise");
  constexpr int kPairs = 100;
  int pairs_with_a_difference = 0;
  size_t rows_compared = 0;
  for (int pair = 0; pair < kPairs; ++pair) {
    DiffRunOptions base_options, next_options;
    base_options.seed = 1000 + 2 * pair;
    next_options.seed = 1001 + 2 * pair;
    const TraceModel base = load_run(directory, "base" + std::to_string(pair), base_options);
    const TraceModel next = load_run(directory, "next" + std::to_string(pair), next_options);
    const RunDiff diff = diff_runs(base, next);
    rows_compared = diff.rows_compared;
    if (diff.significant() > 0) {
      ++pairs_with_a_difference;
      for (const std::string& row : significant_rows(diff)) {
        std::printf("pair %d (seeds %d, %d): %s\n", pair, 1000 + 2 * pair, 1001 + 2 * pair,
                    row.c_str());
      }
    }
  }
  EXPECT_GT(rows_compared, 20u);
  EXPECT_LE(pairs_with_a_difference, 10) << "of " << kPairs << " pairs";
}

// A run whose experts cost 0.002 ms per row, skewed so that rank 0 computes more rows: the cost
// model recovers the cost, and a balanced placement's prediction matches a run built with it.
TEST(PlacementPrediction, CostModelAndStepChangeMatchABalancedRun) {
  const std::string directory = testing::test_directory("placement_prediction");
  DiffRunOptions skewed;
  skewed.seed = 21;
  skewed.hot_layer = 1;
  skewed.hot_factor = 4.0;  // expert 0 (rank 0) gets 4x its tokens on layer 1
  const TraceModel before = load_run(directory, "skewed", skewed);
  const ExpertCostModel cost = fit_expert_cost(before);
  ASSERT_TRUE(cost.valid) << cost.problem;
  // Busy time on a rank = its layers' spans + backward + optimizer; expert rows cost 0.002 ms.
  EXPECT_NEAR(cost.ms_per_row, skewed.ms_per_row, 0.1 * skewed.ms_per_row);
  EXPECT_GT(cost.r_squared, 0.9);

  // Plan: every GPU gets the same rows per layer (the mean).
  const std::vector<RankMeasurement> measured = measure_rank_load(before, {0, 1});
  ASSERT_EQ(measured.size(), 2u);
  std::vector<std::vector<double>> balanced(2);
  for (size_t layer = 0; layer < 2; ++layer) {
    const double mean = 0.5 * (measured[0].rows[layer] + measured[1].rows[layer]);
    balanced[layer] = {mean, mean};
  }
  const PlacementPrediction prediction = predict_placement(before, balanced);
  ASSERT_EQ(prediction.ranks.size(), 2u);
  // Layer 1: rank 0 computes 4 of 8 + 3 extra quarters... i.e. (4+3) x 2 x 256 vs 4 x 2 x 256.
  EXPECT_GT(prediction.ranks[0].rows_before[1], prediction.ranks[1].rows_before[1] * 1.5);
  const double expected_change =
      -cost.ms_per_row * (prediction.ranks[0].rows_before[1] - balanced[1][0]);
  EXPECT_NEAR(prediction.step_ms_change, expected_change, 0.05 * std::abs(expected_change) + 0.02);
  EXPECT_LT(prediction.ranks[0].busy_ms_after, prediction.ranks[0].busy_ms_before);
  EXPECT_GT(prediction.ranks[1].busy_ms_after, prediction.ranks[1].busy_ms_before);
  // The JSON round trip keeps every number.
  const PlacementPrediction copy = prediction_from_json(prediction_to_json(prediction));
  EXPECT_DOUBLE_EQ(copy.step_ms_change, prediction.step_ms_change);
  EXPECT_EQ(copy.ranks[1].rows_after, prediction.ranks[1].rows_after);

  // The run with that placement: the measured change lies in the prediction's neighbourhood.
  DiffRunOptions rebalanced = skewed;
  rebalanced.seed = 22;
  rebalanced.balanced_rows = true;
  const TraceModel after = load_run(directory, "balanced", rebalanced);
  RunDiff diff = diff_runs(before, after);
  check_prediction(diff, after, prediction);
  ASSERT_TRUE(diff.prediction.has_value());
  EXPECT_LT(diff.prediction->measured_step_change, 0);
  EXPECT_TRUE(diff.prediction->inside_interval)
      << "predicted " << prediction.step_ms_change << " measured "
      << diff.prediction->measured_step_change << " [" << diff.prediction->measured_interval.low
      << ", " << diff.prediction->measured_interval.high << "]";
  for (size_t rank = 0; rank < 2; ++rank) {
    // The new run's tokens differ by their own noise (another seed).
    EXPECT_NEAR(diff.prediction->measured[rank].rows[1], balanced[1][rank],
                0.01 * balanced[1][rank]);
  }
  // Bad input: a plan for another number of GPUs.
  EXPECT_THROW(predict_placement(before, {{1, 2, 3}, {1, 2, 3}}), std::invalid_argument);
  EXPECT_THROW(prediction_from_json("{\"ranks\": []}"), std::invalid_argument);
}

// What a step waits for is its busiest rank that step: with loads that vary from step to step
// the mean of the per-step max is above the max of the means (by the noise; on the skewed layer
// rank 0 is the busiest every step, so there they nearly agree). Given the plan's per-step
// busiest rows, the expert compute term compares the two per-step figures.
TEST(PlacementPrediction, TheBusiestRankOfEachStepIsWhatTheChangeCompares) {
  const std::string directory = testing::test_directory("placement_prediction_per_step");
  DiffRunOptions skewed;
  skewed.seed = 23;
  skewed.hot_layer = 1;
  skewed.hot_factor = 4.0;
  const TraceModel before = load_run(directory, "skewed", skewed);
  const std::vector<RankMeasurement> measured = measure_rank_load(before, {0, 1});
  const std::vector<double> busiest = mean_busiest_rows_per_step(before, {0, 1});
  ASSERT_EQ(busiest.size(), 2u);
  for (size_t layer = 0; layer < 2; ++layer) {
    const double max_of_means = std::max(measured[0].rows[layer], measured[1].rows[layer]);
    EXPECT_GE(busiest[layer], max_of_means - 1e-9) << "layer " << layer;
  }
  EXPECT_GT(busiest[0], std::max(measured[0].rows[0], measured[1].rows[0]) + 1.0)
      << "layer 0's ranks trade places from step to step: the per-step max is above";
  EXPECT_NEAR(busiest[1], measured[0].rows[1], 0.005 * measured[0].rows[1]);

  std::vector<std::vector<double>> balanced(2);
  std::vector<double> busiest_after;
  for (size_t layer = 0; layer < 2; ++layer) {
    const double mean = 0.5 * (measured[0].rows[layer] + measured[1].rows[layer]);
    balanced[layer] = {mean, mean};
    busiest_after.push_back(mean + 40.0);  // the plan's per-step max: its mean plus noise
  }
  const PlacementPrediction mean_based = predict_placement(before, balanced);
  const PlacementPrediction per_step =
      predict_placement(before, balanced, 1, nullptr, nullptr, &busiest_after);
  const double ms_per_row = per_step.cost.ms_per_row;
  const double expected =
      ms_per_row * ((busiest_after[0] - busiest[0]) + (busiest_after[1] - busiest[1]));
  ASSERT_EQ(per_step.terms.front().name, "expert compute");
  EXPECT_NEAR(per_step.terms.front().ms, expected, 1e-9);
  EXPECT_NE(per_step.terms.front().basis.find("each step's busiest"), std::string::npos);
  EXPECT_GT(per_step.step_ms_change, mean_based.step_ms_change)
      << "the noise a balanced plan keeps takes part of the mean-based gain back";
  const std::vector<double> one_layer{1.0};
  EXPECT_THROW(predict_placement(before, balanced, 1, nullptr, nullptr, &one_layer),
               std::invalid_argument);
}

}  // namespace
}  // namespace moescope::analysis
