// The planner's search against an exhaustive search written here: on random small layers (up
// to 12 experts, 2-4 GPUs, 1-4 extra slots; Zipf, one or two hot experts, idle experts) the
// default plan is within 1% of the optimum and never worse than the greedy plan. Also the
// issue's case, hierarchical and incremental plans, determinism, and the local search alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "layout_search.h"
#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"
#include "placement_checks.h"

namespace moescope::balancer {
namespace {

using testing::expect_consistent_placement;

// The optimum max GPU load, by brute force: every vector of replica counts, and for each every
// assignment of its replicas to GPUs (heaviest first; a replica never goes to a second empty
// GPU, as empty GPUs are interchangeable), cut only where a GPU already reaches the best
// maximum found.
double optimal_max_gpu_load(const std::vector<double>& loads, int num_slots, int num_gpus) {
  const int num_experts = static_cast<int>(loads.size());
  const int slots_per_gpu = num_slots / num_gpus;
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> counts(static_cast<size_t>(num_experts), 1);
  std::vector<double> items;
  std::vector<double> gpu_load(static_cast<size_t>(num_gpus));
  std::vector<int> gpu_used(static_cast<size_t>(num_gpus));

  std::function<void(size_t, double)> assign = [&](size_t item, double max_load) {
    if (item == items.size()) {
      best = std::min(best, max_load);
      return;
    }
    bool tried_empty = false;
    for (size_t gpu = 0; gpu < gpu_load.size(); ++gpu) {
      if (gpu_used[gpu] == slots_per_gpu) continue;
      if (gpu_used[gpu] == 0) {
        if (tried_empty) continue;
        tried_empty = true;
      }
      const double load = gpu_load[gpu] + items[item];
      if (load >= best) continue;
      gpu_load[gpu] = load;
      ++gpu_used[gpu];
      assign(item + 1, std::max(max_load, load));
      --gpu_used[gpu];
      gpu_load[gpu] -= items[item];
    }
  };
  std::function<void(int, int)> choose = [&](int expert, int extra) {
    if (expert == num_experts - 1) {
      counts[static_cast<size_t>(expert)] = 1 + extra;
      items.clear();
      for (int e = 0; e < num_experts; ++e) {
        for (int r = 0; r < counts[static_cast<size_t>(e)]; ++r) {
          items.push_back(loads[static_cast<size_t>(e)] / counts[static_cast<size_t>(e)]);
        }
      }
      std::sort(items.begin(), items.end(), std::greater<>());
      std::fill(gpu_load.begin(), gpu_load.end(), 0.0);
      std::fill(gpu_used.begin(), gpu_used.end(), 0);
      assign(0, 0.0);
      return;
    }
    for (int more = 0; more <= extra; ++more) {
      counts[static_cast<size_t>(expert)] = 1 + more;
      choose(expert + 1, extra - more);
    }
  };
  choose(0, num_slots - num_experts);
  return best;
}

PlacementConfig global_config(int slots, int gpus, PlacementSearch search, bool refine = true) {
  PlacementConfig config;
  config.num_physical_experts = slots;
  config.num_gpus = gpus;
  config.policy = PlacementPolicy::kGlobal;
  config.search = search;
  config.refine_packing = refine;
  return config;
}

double max_gpu_load(const ExpertLoads& loads, const ExpertPlacement& placement, int layer = 0) {
  const std::vector<double> gpu = gpu_loads_of_placement(loads.layer(layer), placement, layer);
  return *std::max_element(gpu.begin(), gpu.end());
}

struct SmallCase {
  std::string shape;
  std::vector<double> loads;
  int slots;
  int gpus;
};

// Loads of the shapes the issue lists, sized like tokens per expert.
std::vector<double> small_case_loads(const std::string& shape, int experts, std::mt19937& random) {
  std::vector<double> loads(static_cast<size_t>(experts));
  std::uniform_real_distribution<double> noise(0.8, 1.2);
  if (shape == "zipf") {
    std::vector<int> rank(static_cast<size_t>(experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), random);
    const double exponent = std::uniform_real_distribution<double>(0.6, 1.6)(random);
    for (int e = 0; e < experts; ++e) {
      loads[static_cast<size_t>(e)] =
          std::round(4096.0 / std::pow(rank[static_cast<size_t>(e)], exponent) * noise(random));
    }
  } else {
    for (double& load : loads) load = std::round(200.0 * noise(random));
    const int hot = shape == "one hot" ? 1 : 2;
    for (int h = 0; h < hot; ++h) {
      loads[static_cast<size_t>(random() % experts)] = std::round(2000.0 * noise(random));
    }
    if (shape == "dead experts") {
      for (int e = 0; e < experts / 2; ++e) loads[static_cast<size_t>(random() % experts)] = 0.0;
    }
  }
  return loads;
}

std::vector<SmallCase> random_small_cases(int count, uint32_t seed) {
  std::mt19937 random(seed);
  const std::vector<std::string> shapes = {"zipf", "one hot", "two hot", "dead experts"};
  std::vector<SmallCase> cases;
  while (static_cast<int>(cases.size()) < count) {
    const int gpus = 2 + static_cast<int>(random() % 3);
    const int experts = 2 + static_cast<int>(random() % 11);
    const int extra = 1 + static_cast<int>(random() % 4);
    if ((experts + extra) % gpus != 0) continue;
    const std::string& shape = shapes[cases.size() % shapes.size()];
    cases.push_back({shape, small_case_loads(shape, experts, random), experts + extra, gpus});
  }
  return cases;
}

std::string describe(const SmallCase& c) {
  std::string text = c.shape + ", " + std::to_string(c.slots) + " slots on " +
                     std::to_string(c.gpus) + " GPUs, loads";
  for (double load : c.loads) text += " " + std::to_string(static_cast<int>(load));
  return text;
}

TEST(PlacementSearch, TheIssuesCaseReachesTheBalanceGreedyMisses) {
  // `make demo` skewed run, layer 1: greedy replicates experts 1 and 2 and ends at 1.128;
  // replicating 0 and 1 packs to 1.015.
  const ExpertLoads loads{1, 8, {619, 1768, 1691, 17, 0, 0, 0, 0}};
  const double mean = 4095.0 / 2;
  const ExpertPlacement greedy =
      plan_expert_placement(loads, global_config(10, 2, PlacementSearch::kNone));
  const ExpertPlacement searched =
      plan_expert_placement(loads, global_config(10, 2, PlacementSearch::kAuto));
  expect_consistent_placement(searched, global_config(10, 2, PlacementSearch::kAuto), 1, 8);
  EXPECT_NEAR(max_gpu_load(loads, greedy) / mean, 1.128, 0.001);
  EXPECT_LE(max_gpu_load(loads, searched) / mean, 1.015);
  EXPECT_NEAR(max_gpu_load(loads, searched), optimal_max_gpu_load(loads.values, 10, 2), 1e-9);
}

TEST(PlacementSearch, TheBruteForceAgreesWithHandCheckedOptima) {
  // 10 and 0 on 2 GPUs of 2 slots: 5 + 5 on two GPUs (1 replica of the idle expert is forced).
  EXPECT_DOUBLE_EQ(optimal_max_gpu_load({10, 0}, 4, 2), 5.0);
  // 8 4 2 2 on 2 GPUs of 3 slots: 8/3 x 3 + 4 + 2 + 2 splits 8 | 8.
  EXPECT_DOUBLE_EQ(optimal_max_gpu_load({8, 4, 2, 2}, 6, 2), 8.0);
  // 9 1 1 1 on 2 GPUs of 3: two replicas of 9 and two of one 1 give 4.5 + 1 + 0.5 on each GPU
  // (three replicas of 9 would give 3 + 3 + 1 = 7).
  EXPECT_DOUBLE_EQ(optimal_max_gpu_load({9, 1, 1, 1}, 6, 2), 6.0);
}

TEST(PlacementSearch, WithinOnePercentOfTheOptimumAndNeverWorseThanGreedy) {
  int exact = 0;
  const std::vector<SmallCase> cases = random_small_cases(160, 2026);
  for (const SmallCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const ExpertLoads loads{1, static_cast<int>(c.loads.size()), c.loads};
    const PlacementConfig config = global_config(c.slots, c.gpus, PlacementSearch::kAuto);
    PlacementSearchReport report;
    const ExpertPlacement searched = plan_expert_placement(loads, config, &report);
    expect_consistent_placement(searched, config, 1, loads.num_experts);
    const double optimum = optimal_max_gpu_load(c.loads, c.slots, c.gpus);
    const double found = max_gpu_load(loads, searched);
    for (bool refine : {false, true}) {
      const ExpertPlacement greedy = plan_expert_placement(
          loads, global_config(c.slots, c.gpus, PlacementSearch::kNone, refine));
      EXPECT_LE(found, max_gpu_load(loads, greedy) * (1 + 1e-12));
    }
    EXPECT_GE(found, optimum * (1 - 1e-12)) << "the brute force missed a layout";
    EXPECT_LE(found, optimum * 1.01);
    EXPECT_GE(optimum, report.lower_bound[0] * (1 - 1e-12));
    if (report.proven_optimal[0]) {
      EXPECT_NEAR(found, optimum, 1e-9 * optimum);
    }
    exact += found <= optimum * (1 + 1e-9) ? 1 : 0;
  }
  // Small cases go to the exact search; on the hardest ones its node budget ends before the
  // proof (then the local search goes on from its best layout): almost all are optimal.
  EXPECT_GE(exact * 100, static_cast<int>(cases.size()) * 95);
}

TEST(PlacementSearch, TheLocalSearchAloneIsNeverWorseThanItsStart) {
  // The branch and bound is skipped here: how far do the local moves get on their own?
  int within_one_percent = 0, improved = 0;
  const std::vector<SmallCase> cases = random_small_cases(160, 7);
  for (const SmallCase& c : cases) {
    SCOPED_TRACE(describe(c));
    const ExpertLoads loads{1, static_cast<int>(c.loads.size()), c.loads};
    const ExpertPlacement greedy =
        plan_expert_placement(loads, global_config(c.slots, c.gpus, PlacementSearch::kNone));
    ReplicaLayout layout{std::vector<int32_t>(greedy.logcnt(0).begin(), greedy.logcnt(0).end()),
                         {}};
    const int slots_per_gpu = c.slots / c.gpus;
    for (int gpu = 0; gpu < c.gpus; ++gpu) {
      layout.experts_of_gpu.emplace_back(greedy.phy2log(0).begin() + gpu * slots_per_gpu,
                                         greedy.phy2log(0).begin() + (gpu + 1) * slots_per_gpu);
    }
    const double start = layout_max_gpu_load(c.loads, layout);
    ASSERT_NEAR(start, max_gpu_load(loads, greedy), 1e-9 * start);
    LocalSearchOptions options;
    options.evaluation_budget = 20'000;
    options.seed = 1;
    const LayoutSearchResult result = local_layout_search(c.loads, layout, options);
    const double found = layout_max_gpu_load(c.loads, layout);
    EXPECT_LE(found, start);
    EXPECT_EQ(result.improved, found < start);
    int total = 0;
    for (int32_t count : layout.replica_count) {
      EXPECT_GE(count, 1);
      total += count;
    }
    EXPECT_EQ(total, c.slots);
    const double optimum = optimal_max_gpu_load(c.loads, c.slots, c.gpus);
    within_one_percent += found <= optimum * 1.01 ? 1 : 0;
    improved += result.improved ? 1 : 0;
  }
  std::printf("local search alone: %d of %zu within 1%% of the optimum, %d improved on greedy\n",
              within_one_percent, cases.size(), improved);
  EXPECT_GE(within_one_percent * 10, static_cast<int>(cases.size()) * 9);
}

TEST(PlacementSearch, HierarchicalSearchKeepsGroupsOnTheirNodeAndNeverLosesBalance) {
  const int experts = 32, groups = 8, nodes = 2, gpus = 8, slots = 40;
  const ExpertLoads loads = testing::zipf_loads(6, experts, 1.2, 314);
  PlacementConfig config = global_config(slots, gpus, PlacementSearch::kAuto);
  config.num_nodes = nodes;
  config.num_groups = groups;
  config.policy = PlacementPolicy::kHierarchical;
  PlacementConfig unsearched = config;
  unsearched.search = PlacementSearch::kNone;
  const ExpertPlacement searched = plan_expert_placement(loads, config);
  const ExpertPlacement greedy = plan_expert_placement(loads, unsearched);
  expect_consistent_placement(searched, config, 6, experts);
  int better = 0;
  for (int layer = 0; layer < 6; ++layer) {
    const double found = max_gpu_load(loads, searched, layer);
    const double start = max_gpu_load(loads, greedy, layer);
    EXPECT_LE(found, start * (1 + 1e-12)) << "layer " << layer;
    better += found < start * (1 - 1e-9) ? 1 : 0;
    std::vector<int> node_of_group(groups, -1);
    const auto phy2log = searched.phy2log(layer);
    for (int slot = 0; slot < slots; ++slot) {
      const int group = phy2log[static_cast<size_t>(slot)] / (experts / groups);
      int& node = node_of_group[static_cast<size_t>(group)];
      if (node < 0) node = slot / (slots / nodes);
      EXPECT_EQ(node, slot / (slots / nodes)) << "layer " << layer << " group " << group;
    }
  }
  EXPECT_GT(better, 0) << "the search should improve some layer of Zipf 1.2 loads";
}

TEST(PlacementSearch, IncrementalPlansReachTheBoundGreedyCountsCannot) {
  // The issue's loads from the identity layout (4 experts per GPU) to 10 slots: with the greedy
  // replica counts no packing gets below 1.128, so the bound 1.02 needs the search.
  const ExpertLoads loads{1, 8, {619, 1768, 1691, 17, 0, 0, 0, 0}};
  const ExpertPlacement current = make_identity_placement(1, 8, 2);
  PlacementConfig config = global_config(10, 2, PlacementSearch::kAuto);
  const ExpertPlacement searched = plan_expert_placement_incremental(loads, config, current);
  expect_consistent_placement(searched, config, 1, 8);
  EXPECT_LE(max_gpu_load(loads, searched) / (4095.0 / 2), config.incremental_max_over_mean);
  config.search = PlacementSearch::kNone;
  const ExpertPlacement greedy = plan_expert_placement_incremental(loads, config, current);
  EXPECT_GT(max_gpu_load(loads, greedy) / (4095.0 / 2), 1.1);

  // Planned again from the searched placement with the same loads: nothing moves, although the
  // greedy would pick other replica counts.
  const ExpertPlacement again = plan_expert_placement_incremental(loads, config, searched);
  EXPECT_TRUE(plan_expert_migration(searched, again).moves.empty());
}

TEST(PlacementSearch, TheSameSeedGivesTheSamePlan) {
  const ExpertLoads loads = testing::zipf_loads(3, 64, 1.2, 99);
  PlacementConfig config = global_config(128, 64, PlacementSearch::kAuto);
  config.search_seed = 5;
  PlacementSearchReport first_report, second_report;
  const ExpertPlacement first = plan_expert_placement(loads, config, &first_report);
  const ExpertPlacement second = plan_expert_placement(loads, config, &second_report);
  EXPECT_EQ(first.physical_to_logical, second.physical_to_logical);
  EXPECT_EQ(first_report.search_steps, second_report.search_steps);
  EXPECT_GT(first_report.search_steps, 0);
}

}  // namespace
}  // namespace moescope::balancer
