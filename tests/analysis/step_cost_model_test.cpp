// The step cost model (step_cost_terms.h): each term fitted from synthetic runs with known
// costs recovers them, the net prediction lands in the measured change of a run that pays
// those costs (where expert compute alone does not), and the advice follows gain vs move cost.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "diff_run_writer.h"
#include "moescope/analysis/linear_fit.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/run_diff.h"
#include "moescope/analysis/step_cost_terms.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/balancer/running_line_fit.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::DiffRunOptions;

constexpr double kMiB = 1024.0 * 1024.0;

TraceModel load_run(const std::string& directory, const std::string& stem,
                    const DiffRunOptions& options) {
  TraceModel model = load_traces(testing::write_diff_run(directory, stem, options));
  EXPECT_TRUE(model.errors.empty());
  return model;
}

// A skewed run whose collectives cost what the options say: all-to-all 0.1 ms + 0.5 ms/MiB,
// all-reduce 0.3 ms + 2 ms/MiB, migrations 1 ms + 4 ms/MiB.
DiffRunOptions costed_run() {
  DiffRunOptions options;
  options.seed = 5;
  options.hot_layer = 1;
  options.hot_factor = 4.0;
  options.a2a_ms = 0.1;
  options.a2a_ms_per_mib = 0.5;
  options.allreduce_ms = 0.3;
  options.allreduce_ms_per_mib = 2.0;
  options.allreduce_bytes = 4ull << 20;
  // Little noise: the per-layer max over noisy ranks (not modelled) stays below the intervals.
  options.noise_ms = 0.05;
  return options;
}

std::string terms_text(const PlacementPrediction& prediction) {
  std::string text;
  for (const StepCostTerm& term : prediction.terms) {
    text +=
        term.name + " " + std::to_string(term.ms) + " +- " + std::to_string(term.stderr_ms) + "\n";
  }
  return text;
}

}  // namespace

TEST(LinearFit, RecoversALineAndItsErrors) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> xs, ys;
  for (int i = 0; i < 200; ++i) {
    xs.push_back(1e6 * (i % 7));  // bytes: large x, where raw sums would lose the slope
    ys.push_back(0.4 + 2e-6 * xs.back() + noise(rng));
  }
  const LinearFit fit = fit_line(xs, ys);
  ASSERT_TRUE(fit.valid) << fit.problem;
  EXPECT_NEAR(fit.slope, 2e-6, 4 * fit.slope_stderr);
  EXPECT_NEAR(fit.intercept, 0.4, 4 * fit.intercept_stderr);
  EXPECT_GT(fit.slope_stderr, 0);
  EXPECT_LT(fit.slope_stderr, 0.01 * 2e-6);
  EXPECT_GT(fit.r_squared, 0.99);
  // One x value: the slope is unknown, said so.
  const std::vector<double> same(5, 3.0), values{1, 2, 3, 4, 5};
  const LinearFit flat = fit_line(same, values);
  EXPECT_FALSE(flat.valid);
  EXPECT_NE(flat.problem.find("does not vary"), std::string::npos) << flat.problem;
  EXPECT_FALSE(fit_line(std::vector<double>{1.0}, std::vector<double>{2.0}).valid);
}

// `moescope plan --rebalance-every` replays the runtime rebalancer with lines fitted here
// (fit_line over the whole trace); the runtime fits them from running sums all-reduced over the
// ranks (balancer::RunningLineFit). They must be the one estimator, or the replay judges moves
// by other numbers than the runtime: same line and errors on bytes-sized x, with and without a
// spread worth a slope.
TEST(LinearFit, IsTheEstimatorOfTheRuntimesRunningFit) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0.0, 0.05);
  for (const double spread : {1e6, 1e3}) {
    std::vector<double> xs, ys;
    balancer::RunningLineFit running, other_rank;
    for (int i = 0; i < 300; ++i) {
      xs.push_back(8e6 + spread * (i % 11));  // the bytes of one all-to-all, varying a little
      ys.push_back(0.3 + 1e-7 * xs.back() + noise(rng));
      (i % 2 ? running : other_rank).add(xs.back(), ys.back());
    }
    running.merge(other_rank.sums());
    const LinearFit fit = fit_line(xs, ys);
    const balancer::LineEstimate line = running.estimate();
    ASSERT_TRUE(fit.valid && line.has_slope) << fit.problem;
    EXPECT_EQ(line.samples, double(fit.samples));
    // Raw sums keep fewer digits than centred ones: about 1e-14 apart at a spread of 1e6 bytes
    // on 8e6, 2e-9 at 1e3.
    const double relative = spread > 1e4 ? 1e-12 : 1e-7;
    EXPECT_NEAR(line.slope, fit.slope, relative * std::abs(fit.slope)) << spread;
    EXPECT_NEAR(line.intercept, fit.intercept, relative * std::abs(fit.intercept)) << spread;
    EXPECT_NEAR(line.slope_stderr, fit.slope_stderr, relative * fit.slope_stderr) << spread;
    EXPECT_NEAR(line.intercept_stderr, fit.intercept_stderr, relative * fit.intercept_stderr)
        << spread;
  }
}

TEST(StepCostModel, FitsEachCommunicationCostFromTheTrace) {
  const std::string directory = testing::test_directory("step_cost_fit");
  DiffRunOptions options = costed_run();
  options.rebalance_every = 5;
  options.migration_bytes = 2ull << 20;
  options.migration_ms = 1.0;
  options.migration_ms_per_mib = 4.0;
  const CommCostFit fit = fit_comm_costs(load_run(directory, "run", options));

  ASSERT_TRUE(fit.all_to_all.valid) << fit.all_to_all.problem;
  EXPECT_NEAR(fit.all_to_all.slope * kMiB, 0.5, 0.01);
  EXPECT_NEAR(fit.all_to_all.intercept, 0.1, 0.01);
  ASSERT_TRUE(fit.all_reduce_measured) << fit.all_reduce.problem;
  EXPECT_NEAR(fit.all_reduce.slope * kMiB, 2.0, 0.02);
  EXPECT_NEAR(fit.all_reduce.intercept, 0.3, 0.02);
  EXPECT_NEAR(fit.all_to_all_bytes_per_row, 1024.0, 1.0);  // the writer's row size
  ASSERT_TRUE(fit.migration_measured) << fit.migration.problem;
  EXPECT_NEAR(fit.migration.slope * kMiB, 4.0, 0.01);
  EXPECT_NEAR(fit.migration.intercept, 1.0, 0.01);
  EXPECT_EQ(fit.decisions, size_t(2 * 2 * (options.num_steps / 5)));  // ranks x layers x windows

  // Without all-reduce ops of two sizes: derived from the all-to-all, twice the bytes.
  const CommCostFit derived = fit_comm_costs(load_run(directory, "plain", DiffRunOptions{}));
  EXPECT_FALSE(derived.all_reduce_measured);
  EXPECT_FALSE(derived.migration_measured);
  EXPECT_DOUBLE_EQ(derived.all_reduce.slope, 2 * derived.all_to_all.slope);
}

// The plan replicates: the run that follows it pays 2 more all-reduces per step of the replicas'
// gradients and a migration every 10 steps. The net prediction (every term) lands inside the
// measured change; expert compute alone promised more than the run gained.
TEST(StepCostModel, NetPredictionMatchesARunThatPaysForItsReplicas) {
  const std::string directory = testing::test_directory("step_cost_net");
  const DiffRunOptions skewed = costed_run();
  const TraceModel before = load_run(directory, "skewed", skewed);
  const std::vector<RankMeasurement> measured = measure_rank_load(before, {0, 1});
  ASSERT_EQ(measured.size(), 2u);
  std::vector<std::vector<double>> balanced(2);
  for (size_t layer = 0; layer < 2; ++layer) {
    const double mean = 0.5 * (measured[0].rows[layer] + measured[1].rows[layer]);
    balanced[layer] = {mean, mean};
  }
  PlacementChangeCosts costs;
  costs.replicated_before = {0, 0};
  costs.replicated_after = {0, 1};  // one hot expert replicated on layer 1
  costs.expert_bytes = 3 << 20;
  costs.sync_collectives_per_layer = 2;
  costs.expert_copies = 1;
  costs.moved_tensors_per_expert = 1;
  costs.window_steps = 10;
  costs.rebalancer = false;  // the synthetic run has no load all-reduce of its own
  const PlacementPrediction prediction = predict_placement(before, balanced, 1, nullptr, &costs);
  ASSERT_EQ(prediction.terms.size(), 4u);  // compute, all-to-all, replica sync, migration
  EXPECT_EQ(prediction.terms[0].name, "expert compute");
  const StepCostTerm& sync = prediction.terms[2];
  EXPECT_EQ(sync.name, "replica grad sync");
  // 2 all-reduces: 2 x 0.3 ms + 3 MiB x 2 ms/MiB (the bytes of one replicated expert).
  EXPECT_NEAR(sync.ms, 2 * 0.3 + 3 * 2.0, 0.2);
  const StepCostTerm& migration = prediction.terms[3];
  EXPECT_EQ(migration.name, "migration");
  EXPECT_GT(migration.ms, 0);
  double sum = 0;
  for (const StepCostTerm& term : prediction.terms) sum += term.ms;
  EXPECT_DOUBLE_EQ(prediction.step_ms_change, sum);
  EXPECT_GT(prediction.change_high(), prediction.step_ms_change);

  // The run with the plan: balanced rows, the replicas' all-reduces (two ops of 1.5 MiB each:
  // the runtime sums each weight tensor's gradients) and its migrations.
  DiffRunOptions after = skewed;
  after.seed = 6;
  after.balanced_rows = true;
  after.replica_sync_ops = 2;
  after.replica_sync_bytes = 3ull << 19;
  after.rebalance_every = 10;
  // What the plan's move costs over the all-to-all (2 transfers x 0.1 ms + 3 MiB x 0.5 ms/MiB),
  // half per layer.
  after.migration_bytes = 0;
  after.migration_ms = 0.85;
  const TraceModel next = load_run(directory, "rebalanced", after);
  RunDiff diff = diff_runs(before, next);
  check_prediction(diff, next, prediction);
  ASSERT_TRUE(diff.prediction.has_value());
  const PredictionCheck& check = *diff.prediction;
  EXPECT_TRUE(check.inside_interval)
      << terms_text(prediction) << "predicted " << prediction.step_ms_change << " measured "
      << check.measured_step_change << " [" << check.measured_interval.low << ", "
      << check.measured_interval.high << "]";
  // Expert compute alone promised a change below the measured interval.
  EXPECT_LT(prediction.terms[0].ms + prediction.terms[1].ms, check.measured_interval.low);
}

TEST(StepCostModel, AdvisesOnlyWhenTheGainBeatsTheMove) {
  PlacementPrediction prediction;
  prediction.terms = {{"expert compute", -2.0, 0.1, ""},
                      {"replica grad sync", +0.5, 0.05, ""},
                      {"migration", +0.3, 0.01, ""}};  // 30 ms once, over 100 steps
  prediction.step_ms_change = -1.2;
  prediction.step_ms_change_stderr = 0.12;
  prediction.window_steps = 100;
  RebalanceAdvice advice = advise_rebalance(prediction);
  EXPECT_TRUE(advice.rebalance);
  EXPECT_NEAR(advice.gain_ms, 150.0, 1e-9);
  EXPECT_NEAR(advice.move_cost_ms, 30.0, 1e-9);
  EXPECT_TRUE(advice.beyond_uncertainty);
  EXPECT_NE(advice.reason.find("rebalance: gain 150.0 ms over 100 steps beats"), std::string::npos)
      << advice.reason;

  // The same move kept 10 steps: 15 ms of gain against 30 ms of move.
  prediction.terms[2].ms = 3.0;
  prediction.step_ms_change = 1.5;
  prediction.window_steps = 10;
  advice = advise_rebalance(prediction);
  EXPECT_FALSE(advice.rebalance);
  EXPECT_NEAR(advice.gain_ms, 15.0, 1e-9);
  EXPECT_NEAR(advice.move_cost_ms, 30.0, 1e-9);
  EXPECT_NE(advice.reason.find("keep the current placement"), std::string::npos) << advice.reason;
}

}  // namespace moescope::analysis
