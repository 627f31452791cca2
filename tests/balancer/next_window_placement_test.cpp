// Planning for the next window (next_window_placement.h): scenarios from the forecast's errors,
// and a plan chosen by its expected balance over them, never worse there than the greedy plan
// or the search's plan of the forecast, layer by layer.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "moescope/balancer/next_window_placement.h"

namespace moescope::balancer {
namespace {

ExpertLoads loads_of(int layers, int experts, std::vector<double> values) {
  ExpertLoads loads;
  loads.num_layers = layers;
  loads.num_experts = experts;
  loads.values = std::move(values);
  return loads;
}

PlacementConfig two_gpus_ten_slots() {
  PlacementConfig config;
  config.num_gpus = 2;
  config.num_physical_experts = 10;
  return config;
}

}  // namespace

TEST(NextWindowPlacement, ScenariosAreTheForecastPlusEachErrorClampedAtZero) {
  const ExpertLoads forecast = loads_of(1, 4, {100, 50, 20, 10});
  const ExpertLoads error = loads_of(1, 4, {-30, 10, -40, 0});
  const std::vector<ExpertLoads> scenarios = forecast_scenarios(forecast, {error});
  ASSERT_EQ(scenarios.size(), 2u);
  EXPECT_EQ(scenarios[0].values, forecast.values);
  EXPECT_EQ(scenarios[1].values, (std::vector<double>{70, 60, 0, 10}));
  EXPECT_THROW(forecast_scenarios(forecast, {loads_of(1, 3, {1, 2, 3})}), std::invalid_argument);
  EXPECT_THROW(plan_for_next_window({}, two_gpus_ten_slots()), std::invalid_argument);
}

// Loads whose hot experts trade places from window to window: over many seeded cases the plan
// is never worse than the greedy or the search's plan of the forecast on the scenarios, it is a
// valid placement, and it is strictly better than the search's somewhere (it plans for the miss).
TEST(NextWindowPlacement, NeverWorseOnTheScenariosAndBetterWhereTheForecastMisses) {
  std::mt19937_64 random(11);
  std::uniform_real_distribution<double> base(10.0, 200.0), miss(-0.5, 0.5);
  const PlacementConfig config = two_gpus_ten_slots();
  PlacementConfig greedy = config;
  greedy.refine_packing = false;
  greedy.search = PlacementSearch::kNone;
  int better_than_search = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<double> values(16);
    for (double& value : values) value = base(random);
    values[0] *= 8, values[9] *= 6;  // a hot expert per layer
    const ExpertLoads forecast = loads_of(2, 8, values);
    std::vector<ExpertLoads> errors;
    for (int k = 0; k < 4; ++k) {
      std::vector<double> error(16);
      for (size_t i = 0; i < error.size(); ++i) error[i] = miss(random) * values[i];
      errors.push_back(loads_of(2, 8, error));
    }
    const std::vector<ExpertLoads> scenarios = forecast_scenarios(forecast, errors);
    const ExpertPlacement plan = plan_for_next_window(scenarios, config);
    ASSERT_EQ(plan.num_layers, 2);
    ASSERT_EQ(plan.num_physical_experts, 10 * 2 / 2);
    const ExpertPlacement greedy_plan = plan_expert_placement(forecast, greedy);
    const ExpertPlacement search_plan = plan_expert_placement(forecast, config);
    for (int layer = 0; layer < 2; ++layer) {
      int replicas = 0;
      for (int32_t count : plan.logcnt(layer)) replicas += count;
      EXPECT_EQ(replicas, 10);
      const double chosen = expected_max_over_mean(plan, scenarios, layer);
      EXPECT_LE(chosen, expected_max_over_mean(greedy_plan, scenarios, layer) + 1e-12);
      const double searched = expected_max_over_mean(search_plan, scenarios, layer);
      EXPECT_LE(chosen, searched + 1e-12);
      better_than_search += chosen < searched - 1e-9 ? 1 : 0;
    }
  }
  EXPECT_GT(better_than_search, 0);
}

// The runtime's counterpart plans incrementally from the placement it has: over seeded cases the
// chosen plan is never worse on the scenarios than the placement kept or the forecast's
// incremental plan, never worse than the kept one on the forecast itself (what the rebalancer
// reports as imbalance after), and somewhere strictly better than the forecast's plan; with
// the forecast alone it is the forecast's incremental plan or, when that balances no better,
// the placement kept.
TEST(NextWindowPlacement, IncrementalPlanWeighsTheScenariosFromThePlacementItHas) {
  std::mt19937_64 random(5);
  std::uniform_real_distribution<double> base(10.0, 200.0), miss(-0.6, 0.6);
  PlacementConfig config = two_gpus_ten_slots();
  config.policy = PlacementPolicy::kGlobal;
  const ExpertPlacement current = plan_expert_placement(
      loads_of(1, 8, {1, 1, 1, 1, 1, 1, 1, 1}), config);  // uniform: 2 replicas, no preference
  int better_than_forecast_plan = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<double> values(8);
    for (double& value : values) value = base(random);
    values[trial % 8] *= 6;  // a hot expert
    const ExpertLoads forecast = loads_of(1, 8, values);
    std::vector<ExpertLoads> errors;
    for (int k = 0; k < 4; ++k) {
      std::vector<double> error(8);
      for (size_t i = 0; i < error.size(); ++i) error[i] = miss(random) * values[i];
      errors.push_back(loads_of(1, 8, error));
    }
    const std::vector<ExpertLoads> scenarios = forecast_scenarios(forecast, errors);
    const ExpertPlacement plan = plan_incremental_for_next_window(scenarios, config, current);
    ASSERT_EQ(plan.num_physical_experts, 10);
    const ExpertPlacement forecast_plan =
        plan_expert_placement_incremental(forecast, config, current);
    const double chosen = expected_max_over_mean(plan, scenarios, 0);
    EXPECT_LE(chosen, expected_max_over_mean(current, scenarios, 0) + 1e-12);
    const double forecast_only = expected_max_over_mean(forecast_plan, scenarios, 0);
    const bool forecast_plan_eligible = expected_max_over_mean(forecast_plan, {forecast}, 0) <=
                                        expected_max_over_mean(current, {forecast}, 0);
    if (forecast_plan_eligible) {
      EXPECT_LE(chosen, forecast_only + 1e-12);
    }
    EXPECT_LE(expected_max_over_mean(plan, {forecast}, 0),
              expected_max_over_mean(current, {forecast}, 0) + 1e-12);
    better_than_forecast_plan += chosen < forecast_only - 1e-9 ? 1 : 0;

    const ExpertPlacement alone = plan_incremental_for_next_window({forecast}, config, current);
    const bool forecast_plan_better = expected_max_over_mean(forecast_plan, {forecast}, 0) <
                                      expected_max_over_mean(current, {forecast}, 0);
    EXPECT_EQ(alone.physical_to_logical,
              (forecast_plan_better ? forecast_plan : current).physical_to_logical);
  }
  EXPECT_GT(better_than_forecast_plan, 0);
  EXPECT_THROW(plan_incremental_for_next_window({}, config, current), std::invalid_argument);
  EXPECT_THROW(
      plan_incremental_for_next_window({loads_of(1, 6, {1, 1, 1, 1, 1, 1})}, config, current),
      std::invalid_argument);
}

}  // namespace moescope::balancer
