// The rebalancer's cost rule: the running line fit it measures with, and the decision from the
// terms (a placement that pays is applied, one whose replicas' sync costs more than its gain is
// kept), with the numbers the trace records.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "moescope/balancer/rebalance_cost_model.h"
#include "moescope/balancer/running_line_fit.h"

using namespace moescope::balancer;

TEST(RunningLineFitTest, RecoversANoisyLineWithItsErrorAndMergesLikeOneFit) {
  std::mt19937 random(7);
  std::normal_distribution<double> noise(0.0, 0.05);
  RunningLineFit whole, first, second;
  for (int i = 0; i < 200; ++i) {
    const double x = 100.0 + 10.0 * (i % 20);
    const double y = 0.4 + 0.002 * x + noise(random);
    whole.add(x, y);
    (i < 100 ? first : second).add(x, y);
  }
  whole.add(NAN, 1.0);  // left out
  const LineEstimate line = whole.estimate();
  ASSERT_TRUE(line.has_slope);
  EXPECT_EQ(line.samples, 200);
  EXPECT_NEAR(line.slope, 0.002, 4 * line.slope_stderr);
  EXPECT_NEAR(line.intercept, 0.4, 4 * line.intercept_stderr);
  EXPECT_GT(line.slope_stderr, 0);
  EXPECT_LT(line.slope_stderr, 0.0005);

  first.merge(second.sums());  // what the all-reduce of the sums does
  const LineEstimate merged = first.estimate();
  EXPECT_NEAR(merged.slope, line.slope, 1e-12);
  EXPECT_NEAR(merged.slope_stderr, line.slope_stderr, 1e-12);
}

TEST(RunningLineFitTest, WithoutASpreadInXTheSlopeIsUnknownAndTheInterceptIsTheMean) {
  RunningLineFit fit;
  EXPECT_FALSE(fit.estimate().valid);
  for (double y : {1.0, 2.0, 3.0}) fit.add(64.0, y);
  const LineEstimate line = fit.estimate();
  EXPECT_TRUE(line.valid);
  EXPECT_FALSE(line.has_slope);
  EXPECT_DOUBLE_EQ(line.intercept, 2.0);
  EXPECT_NEAR(line.intercept_stderr, std::sqrt(1.0 / 3.0), 1e-12);  // sd 1 over sqrt(3)
}

namespace {

LineEstimate line(double intercept, double slope, double intercept_stderr, double slope_stderr) {
  LineEstimate estimate;
  estimate.valid = estimate.has_slope = true;
  estimate.samples = 100;
  estimate.intercept = intercept;
  estimate.slope = slope;
  estimate.intercept_stderr = intercept_stderr;
  estimate.slope_stderr = slope_stderr;
  return estimate;
}

// Expert compute 0.01 ms/row (+-0.0005), all-to-all 1e-6 ms/B, all-reduce 0.5 ms fixed +
// 2e-6 ms/B, migration 1e-6 ms/B.
RebalanceCostRates measured_rates() {
  RebalanceCostRates rates;
  rates.compute = line(0.05, 0.01, 0.01, 0.0005);
  rates.all_to_all = line(0.1, 1e-6, 0.01, 1e-8);
  rates.all_reduce = line(0.5, 2e-6, 0.05, 1e-7);
  rates.migration = line(1.0, 1e-6, 0.2, 5e-8);
  return rates;
}

}  // namespace

TEST(RebalanceCostModelTest, APlacementThatSavesTheBusiestRankManyRowsIsApplied) {
  RebalanceCandidate candidate;
  candidate.busiest_rows_before = 3000;
  candidate.busiest_rows_after = 2000;
  candidate.row_bytes = 256;
  candidate.sync_collectives_added = 2;  // the layer's first replica: w_gate_up and w_down
  candidate.sync_bytes_added = 100000;   // one expert's gradient
  candidate.migration_bytes = 400000;
  candidate.window_steps = 50;
  candidate.moves = true;
  const RebalanceVerdict verdict = judge_rebalance(measured_rates(), candidate);
  // 1000 rows x (0.01 ms x 3 passes + 256 B x 1e-6 ms/B x 4 all-to-alls) = 31.024 ms
  EXPECT_NEAR(verdict.gain_ms, 31.024, 1e-9);
  EXPECT_NEAR(verdict.replica_sync_ms, 2 * 0.5 + 100000 * 2e-6, 1e-9);  // 1.2
  EXPECT_NEAR(verdict.migration_ms, 1.0 + 400000 * 1e-6, 1e-9);         // 1.4 once
  EXPECT_NEAR(verdict.net_ms, verdict.gain_ms - verdict.replica_sync_ms - 1.4 / 50, 1e-9);
  EXPECT_NEAR(verdict.gain_stderr_ms, std::hypot(1000 * 0.0005 * 3, 1000 * 256 * 4 * 1e-8), 1e-9);
  EXPECT_GT(verdict.net_low(), 0);
  EXPECT_TRUE(verdict.apply);
  EXPECT_EQ(verdict.reason, RebalanceReason::kPays);
}

TEST(RebalanceCostModelTest, AReplicaWhoseGradientSyncCostsMoreThanItsGainIsKept) {
  RebalanceCandidate candidate;
  candidate.busiest_rows_before = 1100;
  candidate.busiest_rows_after = 1000;  // 100 rows: about 3.1 ms per step
  candidate.row_bytes = 256;
  candidate.sync_collectives_added = 2;
  candidate.sync_bytes_added = 2e6;  // a big expert: 2 x 0.5 + 4 ms of all-reduce per step
  candidate.migration_bytes = 8e6;
  candidate.window_steps = 50;
  candidate.moves = true;
  const RebalanceVerdict verdict = judge_rebalance(measured_rates(), candidate);
  EXPECT_NEAR(verdict.gain_ms, 100 * (0.03 + 256e-6 * 4), 1e-9);
  EXPECT_NEAR(verdict.replica_sync_ms, 5.0, 1e-9);
  EXPECT_GT(verdict.replica_sync_ms, verdict.gain_ms);
  EXPECT_NEAR(verdict.net_ms, verdict.gain_ms - 5.0 - verdict.migration_ms / 50, 1e-9);
  EXPECT_LT(verdict.net_ms, 0);
  EXPECT_FALSE(verdict.apply);
  EXPECT_EQ(verdict.reason, RebalanceReason::kCostsExceedGain);
}

TEST(RebalanceCostModelTest, ANetGainInsideItsUncertaintyIsKeptUnlessThePointEstimateDecides) {
  RebalanceCostRates rates = measured_rates();
  rates.compute = line(0.05, 0.01, 0.01, 0.02);  // the slope is barely known
  RebalanceCandidate candidate;
  candidate.busiest_rows_before = 1100;
  candidate.busiest_rows_after = 1000;
  candidate.window_steps = 50;
  candidate.moves = true;
  const RebalanceVerdict cautious = judge_rebalance(rates, candidate);
  EXPECT_GT(cautious.net_ms, 0);
  EXPECT_LE(cautious.net_low(), 0);
  EXPECT_FALSE(cautious.apply);
  EXPECT_EQ(cautious.reason, RebalanceReason::kWithinUncertainty);
  const RebalanceVerdict bold = judge_rebalance(rates, candidate, /*decide_on_lower_bound=*/false);
  EXPECT_TRUE(bold.apply);
  EXPECT_EQ(bold.reason, RebalanceReason::kPays);
}

TEST(RebalanceCostModelTest, WithoutMeasurementsTheAssumedRatesDecideAndNoMoveIsNeverApplied) {
  RebalanceCostRates rates;  // nothing measured
  rates.assumed_ms_per_row = 0.01;
  RebalanceCandidate candidate;
  candidate.busiest_rows_before = 2000;
  candidate.busiest_rows_after = 1000;
  candidate.migration_bytes = 1e7;  // 1 ms at the assumed 10 GB/s
  candidate.window_steps = 10;
  candidate.moves = true;
  RebalanceVerdict verdict = judge_rebalance(rates, candidate);
  EXPECT_NEAR(verdict.gain_ms, 10.0, 1e-9);
  EXPECT_NEAR(verdict.migration_ms, 1.0, 1e-9);
  EXPECT_NEAR(verdict.net_ms, 10.0 - 0.1, 1e-9);
  EXPECT_TRUE(verdict.apply);
  candidate.moves = false;
  verdict = judge_rebalance(rates, candidate);
  EXPECT_FALSE(verdict.apply);
  EXPECT_EQ(verdict.reason, RebalanceReason::kNoMove);
}
