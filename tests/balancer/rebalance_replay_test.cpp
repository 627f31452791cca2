// One layer's rebalance decision (what the runtime's ExpertRebalancer and `moescope plan
// --rebalance-every` both take) and its replay over recorded steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "moescope/balancer/layer_rebalance.h"
#include "moescope/balancer/rebalance_replay.h"

using namespace moescope::balancer;

namespace {

constexpr int kExperts = 8, kSlots = 10, kGpus = 2;

// A measured compute line (ms per forward row), nothing else measured.
RebalanceCostRates compute_rates(double ms_per_row) {
  RebalanceCostRates rates;
  rates.compute.valid = rates.compute.has_slope = true;
  rates.compute.slope = ms_per_row;
  rates.compute.samples = 100;
  return rates;
}

// Tokens per expert of one step: every expert 100 rows, `hot` expert `hot_rows`.
std::vector<double> step_tokens(int hot, double hot_rows) {
  std::vector<double> tokens(kExperts, 100.0);
  tokens[size_t(hot)] = hot_rows;
  return tokens;
}

// `steps` steps of two layers: layer 0 uniform, layer 1 with expert 5 hot.
std::vector<ExpertLoads> skewed_steps(size_t steps) {
  std::vector<ExpertLoads> recorded;
  for (size_t s = 0; s < steps; ++s) {
    ExpertLoads loads{2, kExperts, std::vector<double>(kExperts, 100.0)};
    const std::vector<double> hot = step_tokens(5, 700.0);
    loads.values.insert(loads.values.end(), hot.begin(), hot.end());
    recorded.push_back(std::move(loads));
  }
  return recorded;
}

RebalanceReplayOptions replay_options(double ms_per_row, double migrated_bytes) {
  RebalanceReplayOptions options;
  options.num_slots = kSlots;
  options.num_gpus = kGpus;
  options.policy.interval_steps = 10;  // the window is the interval
  options.policy.warmup_steps = 10;
  options.bytes.migrated = migrated_bytes;
  options.rates = {compute_rates(ms_per_row)};
  return options;
}

}  // namespace

TEST(LayerRebalanceTest, BalancedForecastIsNotPlanned) {
  const ExpertPlacement current = initial_slot_placement(kExperts, kSlots, kGpus);
  const std::vector<double> forecast(kExperts, 100.0);
  const LayerRebalanceDecision decision =
      decide_layer_rebalance(forecast, {}, current, {}, {}, compute_rates(0.01), 0.1);
  EXPECT_EQ(decision.verdict.reason, RebalanceReason::kBalanced);
  EXPECT_FALSE(decision.verdict.apply);
  EXPECT_EQ(decision.candidate.physical_to_logical, current.physical_to_logical);
  EXPECT_EQ(decision.moves, 0u);
  // The spare slots replicate two experts: each GPU holds 3 whole experts and 2 halves.
  EXPECT_DOUBLE_EQ(decision.busiest_rows_before, 400.0);
  EXPECT_EQ(decision.replicated_before, 2);
}

TEST(LayerRebalanceTest, AHotExpertIsReplicatedWhenItPaysAndKeptWhenTheMoveCostsMore) {
  const ExpertPlacement current = initial_slot_placement(kExperts, kSlots, kGpus);
  const std::vector<double> forecast = step_tokens(5, 700.0);
  RebalancePolicy policy;
  policy.window_steps = 10;
  ExpertSlotBytes bytes;
  bytes.migrated = 1e6;
  const LayerRebalanceDecision pays =
      decide_layer_rebalance(forecast, {}, current, policy, bytes, compute_rates(0.01), 0.1);
  EXPECT_EQ(pays.verdict.reason, RebalanceReason::kPays);
  EXPECT_TRUE(pays.verdict.apply);
  EXPECT_GT(pays.imbalance_before, policy.imbalance_threshold);
  EXPECT_LT(pays.busiest_rows_after, pays.busiest_rows_before);
  EXPECT_GT(pays.moves, 0u);
  EXPECT_DOUBLE_EQ(pays.bytes_to_move, double(pays.moves) * bytes.migrated);
  // The gain is the busiest GPU's rows saved x ms per row x 3 passes.
  EXPECT_NEAR(pays.verdict.gain_ms, (pays.busiest_rows_before - pays.busiest_rows_after) * 0.03,
              1e-9);

  // The same plan at 1 ms per MB moved over 1e12 bytes a copy: the move costs more.
  bytes.migrated = 1e12;
  RebalanceCostRates rates = compute_rates(0.01);
  rates.assumed_bytes_per_ms = 1e6;
  const LayerRebalanceDecision kept =
      decide_layer_rebalance(forecast, {}, current, policy, bytes, rates, 0.1);
  EXPECT_EQ(kept.verdict.reason, RebalanceReason::kCostsExceedGain);
  EXPECT_FALSE(kept.verdict.apply);
  EXPECT_EQ(kept.busiest_rows_after, pays.busiest_rows_after);  // the same plan, judged
}

// The imbalance rule (moe_train --rebalance-rule imbalance, the demo's): the mean step time x
// the share of imbalance removed x the interval, against the bytes at the assumed bandwidth.
TEST(LayerRebalanceTest, TheImbalanceRuleWeighsTheStepTimeAgainstBytesOverBandwidth) {
  const ExpertPlacement current = initial_slot_placement(kExperts, kSlots, kGpus);
  const std::vector<double> forecast = step_tokens(5, 700.0);
  RebalancePolicy policy;
  policy.rule = RebalanceRule::kImbalanceGain;
  policy.interval_steps = 10;
  policy.transfer_bytes_per_second = 1e9;
  ExpertSlotBytes bytes;
  bytes.migrated = 1e6;
  // The cost rule would keep it: every row costs nothing.
  const LayerRebalanceDecision applied =
      decide_layer_rebalance(forecast, {}, current, policy, bytes, compute_rates(0.0), 0.1);
  EXPECT_EQ(applied.verdict.reason, RebalanceReason::kImbalanceRuleApplied);
  EXPECT_TRUE(applied.verdict.apply);
  ASSERT_GT(applied.moves, 0u);
  EXPECT_NEAR(applied.imbalance_gain_seconds,
              0.1 * (1 - applied.imbalance_after / applied.imbalance_before) * 10, 1e-12);
  EXPECT_DOUBLE_EQ(applied.imbalance_cost_seconds, applied.bytes_to_move / 1e9);
  // At 1 kB/s the same move costs more than it gains.
  policy.transfer_bytes_per_second = 1e3;
  const LayerRebalanceDecision kept =
      decide_layer_rebalance(forecast, {}, current, policy, bytes, compute_rates(0.0), 0.1);
  EXPECT_EQ(kept.verdict.reason, RebalanceReason::kImbalanceRuleKept);
  EXPECT_FALSE(kept.verdict.apply);
  // A balanced forecast is not planned under either rule.
  const LayerRebalanceDecision balanced = decide_layer_rebalance(
      std::vector<double>(kExperts, 100.0), {}, current, policy, bytes, compute_rates(0.0), 0.1);
  EXPECT_EQ(balanced.verdict.reason, RebalanceReason::kBalanced);
}

TEST(LayerRebalanceTest, WrongShapesAreRefusedNamingThem) {
  const ExpertPlacement current = initial_slot_placement(kExperts, kSlots, kGpus);
  const std::vector<double> forecast(kExperts - 1, 1.0);
  try {
    decide_layer_rebalance(forecast, {}, current, {}, {}, {}, 0.1);
    FAIL() << "a 7-expert forecast on an 8-expert placement was taken";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("7 experts"), std::string::npos) << error.what();
  }
}

TEST(RebalanceReplayTest, APlacementAppliedAtTheFirstDecisionHoldsForTheKeptSteps) {
  const std::vector<ExpertLoads> steps = skewed_steps(60);
  const RebalanceReplay replay = replay_rebalancer(steps, replay_options(0.01, 1e6), 10);
  ASSERT_EQ(replay.layers.size(), 2u);
  EXPECT_EQ(replay.kept_steps, 50u);
  const ReplayedLayer& uniform = replay.layers[0];
  const ReplayedLayer& hot = replay.layers[1];
  // Decisions after the 10th, 20th, ..., 60th step; the first comes after the last skipped
  // step (its move is not counted), the other 5 after kept ones.
  EXPECT_EQ(hot.decisions, 5u);
  EXPECT_EQ(uniform.applied, 0u);  // 1.0 max/mean: balanced, nothing planned
  // The hot layer's plan is applied at the first decision and holds from the first kept step;
  // the loads do not change, so no later decision moves anything.
  EXPECT_EQ(hot.applied, 0u);
  EXPECT_EQ(hot.expert_copies, 0u);
  const double initial =
      busiest_gpu_load(steps[0].layer(1), initial_slot_placement(kExperts, kSlots, kGpus));
  EXPECT_DOUBLE_EQ(hot.mean_busiest_rows, busiest_gpu_load(steps[0].layer(1), hot.final_placement));
  EXPECT_LT(hot.mean_busiest_rows, initial);
  EXPECT_GE(replicated_experts(hot.final_placement), 1);
  EXPECT_EQ(hot.final_placement.logcnt(0)[5], 2);  // the hot expert got the spare slot
  // Each GPU's mean rows: the step's tokens split by the placement held, the busiest their max.
  ASSERT_EQ(hot.mean_gpu_rows.size(), size_t(kGpus));
  EXPECT_DOUBLE_EQ(hot.mean_gpu_rows[0] + hot.mean_gpu_rows[1], 7 * 100.0 + 700.0);
  EXPECT_DOUBLE_EQ(std::max(hot.mean_gpu_rows[0], hot.mean_gpu_rows[1]), hot.mean_busiest_rows);
}

TEST(RebalanceReplayTest, BelowTheThresholdNothingMovesAndTheInitialPlacementCounts) {
  const std::vector<ExpertLoads> steps = skewed_steps(30);
  RebalanceReplayOptions options = replay_options(0.01, 1e6);
  options.policy.imbalance_threshold = 1e9;
  const RebalanceReplay replay = replay_rebalancer(steps, options, 5);
  const ExpertPlacement initial = initial_slot_placement(kExperts, kSlots, kGpus);
  for (int layer = 0; layer < 2; ++layer) {
    const ReplayedLayer& replayed = replay.layers[size_t(layer)];
    EXPECT_EQ(replayed.applied, 0u);
    EXPECT_EQ(replayed.decisions, 3u);  // after the 10th, 20th and 30th step
    EXPECT_DOUBLE_EQ(replayed.mean_busiest_rows, busiest_gpu_load(steps[0].layer(layer), initial));
    EXPECT_DOUBLE_EQ(replayed.mean_replicated_experts, 2.0);
    EXPECT_EQ(replayed.final_placement.physical_to_logical, initial.physical_to_logical);
  }
}

TEST(RebalanceReplayTest, StepsOfAnotherShapeOrNoneAreRefused) {
  EXPECT_THROW(replay_rebalancer({}, replay_options(0.01, 1e6), 0), std::invalid_argument);
  std::vector<ExpertLoads> steps = skewed_steps(3);
  steps[2].num_experts = 4;
  steps[2].values.resize(8);
  try {
    replay_rebalancer(steps, replay_options(0.01, 1e6), 0);
    FAIL() << "a step of 2 x 4 loads after 2 x 8 ones was taken";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("2 x 4 after 2 x 8"), std::string::npos)
        << error.what();
  }
}

TEST(RebalanceReplayTest, TheRuntimesFitsDecideWhenItMovesAndTheStepsBeforeKeepTheOldPlacement) {
  const std::vector<ExpertLoads> steps = skewed_steps(60);
  RebalanceReplayOptions options = replay_options(0.01, 1e6);
  // Until the 30th step the compute line is too uncertain for the net gain's lower bound to
  // clear 0 (the runtime's first samples); from then on it is tight.
  RebalanceCostRates uncertain = compute_rates(0.01);
  uncertain.compute.slope_stderr = 1.0;
  options.rates.assign(steps.size(), compute_rates(0.01));
  std::fill(options.rates.begin(), options.rates.begin() + 29, uncertain);
  const RebalanceReplay replay = replay_rebalancer(steps, options, 10);
  const ReplayedLayer& hot = replay.layers[1];
  EXPECT_EQ(hot.applied, 1u);  // after the 30th step
  EXPECT_GT(hot.expert_copies, 0u);
  // 20 kept steps (11th-30th) under the initial placement, 30 under the plan.
  const double before =
      busiest_gpu_load(steps[0].layer(1), initial_slot_placement(kExperts, kSlots, kGpus));
  const double after = busiest_gpu_load(steps[0].layer(1), hot.final_placement);
  EXPECT_LT(after, before);
  EXPECT_NEAR(hot.mean_busiest_rows, (20 * before + 30 * after) / 50, 1e-9);

  options.rates.resize(7);
  EXPECT_THROW(replay_rebalancer(steps, options, 10), std::invalid_argument);
}

// The runtime times its own moves and weighs every later move by them: a first move that took
// long keeps the placement when the hot expert changes, which it follows when moves are cheap.
TEST(RebalanceReplayTest, AfterItsFirstMoveTheRuntimeWeighsMovesByWhatTheyTook) {
  std::vector<ExpertLoads> steps = skewed_steps(60);
  for (size_t s = 30; s < steps.size(); ++s) {  // layer 1's hot expert moves from 5 to 2
    const std::vector<double> hot = step_tokens(2, 700.0);
    std::copy(hot.begin(), hot.end(), steps[s].values.begin() + kExperts);
  }
  RebalanceReplayOptions options = replay_options(0.01, 1e6);
  options.move_time.valid = true;
  options.move_time.intercept = 0.5;  // ms: cheap
  const RebalanceReplay cheap = replay_rebalancer(steps, options, 0);
  EXPECT_GE(cheap.layers[1].applied, 2u);
  options.move_time.intercept = 1e5;  // ms: a move costs more than any window gains
  const RebalanceReplay costly = replay_rebalancer(steps, options, 0);
  EXPECT_EQ(costly.layers[1].applied, 1u);
  EXPECT_GT(costly.layers[1].mean_busiest_rows, cheap.layers[1].mean_busiest_rows);
}

// Under the imbalance rule the replay weighs each decision by the steps' mean time since the
// last one, and needs each step's time.
TEST(RebalanceReplayTest, TheImbalanceRuleMovesByTheRecordedStepTimes) {
  const std::vector<ExpertLoads> steps = skewed_steps(40);
  RebalanceReplayOptions options = replay_options(0.0, 1e6);  // the cost rule would keep
  options.policy.rule = RebalanceRule::kImbalanceGain;
  options.policy.transfer_bytes_per_second = 1e9;
  EXPECT_THROW(replay_rebalancer(steps, options, 10), std::invalid_argument);  // no step times
  options.step_seconds.assign(steps.size(), 0.05);
  const RebalanceReplay moved = replay_rebalancer(steps, options, 10);
  EXPECT_EQ(moved.layers[1].final_placement.logcnt(0)[5], 2);  // the hot expert replicated
  EXPECT_LT(moved.layers[1].mean_busiest_rows,
            busiest_gpu_load(steps[0].layer(1), initial_slot_placement(kExperts, kSlots, kGpus)));
  // Steps of 1 ns gain nothing worth a megabyte at 1 GB/s: the initial placement stays.
  options.step_seconds.assign(steps.size(), 1e-9);
  const RebalanceReplay kept = replay_rebalancer(steps, options, 10);
  EXPECT_EQ(kept.layers[1].final_placement.physical_to_logical,
            initial_slot_placement(kExperts, kSlots, kGpus).physical_to_logical);
}
