// planner_bench: the expert placement planner on synthetic Zipf-skewed expert loads.
// For each shape it reports max/mean per-GPU load (mean and worst over layers) of
//   identity     - the starting placement: experts split contiguously over GPUs, no replicas
//   greedy       - the planner with the published greedy packing only (EPLB as described)
//   refined      - greedy packing + swap refinement, no search (`--search none`)
//   search       - the planner's default: refined, then the search (`--search auto`)
//   bound        - a lower bound on any plan's max/mean (mean load, smallest largest replica)
//   hierarchical - the default planner, 8 GPUs per node and 8 expert groups (64-GPU shapes only)
// and the planning time per layer (thread CPU time); then small skewed layers against the exact
// optimum, the balance of each plan on the next window of loads, and the cost of re-planning. Plain
// executable: prints markdown tables.
//
// Usage: planner_bench [--layers N] [--tokens T] [--min-seconds S]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"

namespace {

using moescope::balancer::ExpertLoads;
using moescope::balancer::ExpertPlacement;
using moescope::balancer::PlacementConfig;
using moescope::balancer::PlacementPolicy;
using moescope::balancer::PlacementSearch;
using moescope::balancer::PlacementSearchReport;

// CPU time of the calling thread: planning times that other processes on a shared machine do
// not inflate (the planner is single-threaded).
struct ThreadCpuClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<ThreadCpuClock>;
  static constexpr bool is_steady = true;
  static time_point now() {
    timespec time{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time);
    return time_point(duration(static_cast<rep>(time.tv_sec) * 1'000'000'000 + time.tv_nsec));
  }
};

struct BenchSettings {
  int num_layers = 16;
  int tokens_per_layer = 65536;  // routed tokens (tokens x top-k) per layer and step
  double min_seconds = 0.2;      // per timing trial
};

// Token counts per expert sampled from Zipf(exponent) over a random ranking of the experts.
// The ranking (which experts are hot) comes from ranking_seed, the sampling noise from
// sampling_seed, so two calls with one ranking_seed model the same router on two steps.
ExpertLoads sampled_zipf_loads(int num_layers, int num_experts, double exponent, int tokens,
                               uint32_t ranking_seed, uint32_t sampling_seed) {
  std::mt19937_64 ranking_random(ranking_seed);
  std::mt19937_64 sampling_random(sampling_seed);
  ExpertLoads loads;
  loads.num_layers = num_layers;
  loads.num_experts = num_experts;
  loads.values.assign(static_cast<size_t>(num_layers) * num_experts, 0.0);
  for (int layer = 0; layer < num_layers; ++layer) {
    std::vector<int> rank(static_cast<size_t>(num_experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), ranking_random);
    std::vector<double> weight(static_cast<size_t>(num_experts));
    for (int e = 0; e < num_experts; ++e) {
      weight[static_cast<size_t>(e)] = 1.0 / std::pow(rank[static_cast<size_t>(e)], exponent);
    }
    std::discrete_distribution<int> pick(weight.begin(), weight.end());
    double* row = loads.values.data() + static_cast<size_t>(layer) * num_experts;
    for (int t = 0; t < tokens; ++t) row[pick(sampling_random)] += 1.0;
  }
  return loads;
}

struct Balance {
  double mean = 0.0;   // mean over layers of max/mean per GPU
  double worst = 0.0;  // worst layer
};

template <typename GpuLoadsOfLayer>
Balance balance_over_layers(const ExpertLoads& loads, GpuLoadsOfLayer&& gpu_loads_of_layer) {
  Balance balance;
  for (int layer = 0; layer < loads.num_layers; ++layer) {
    const double ratio =
        moescope::balancer::summarize_gpu_loads(gpu_loads_of_layer(layer)).max_over_mean();
    balance.mean += ratio / loads.num_layers;
    balance.worst = std::max(balance.worst, ratio);
  }
  return balance;
}

Balance planned_balance(const ExpertLoads& loads, const ExpertPlacement& placement) {
  return balance_over_layers(loads, [&](int layer) {
    return moescope::balancer::gpu_loads_of_placement(loads.layer(layer), placement, layer);
  });
}

// Microseconds per layer: the best of 3 trials, each planning all layers repeatedly for at
// least min_seconds (best-of filters out other processes on a shared machine).
double microseconds_per_layer(const ExpertLoads& loads, const PlacementConfig& config,
                              double min_seconds) {
  using clock = ThreadCpuClock;
  double best = 1e300;
  for (int trial = 0; trial < 3; ++trial) {
    int64_t plans = 0;
    const auto start = clock::now();
    double elapsed = 0.0;
    do {
      const ExpertPlacement placement = moescope::balancer::plan_expert_placement(loads, config);
      // Keep the result observable so the call is not optimised away.
      if (placement.physical_to_logical.empty()) std::abort();
      ++plans;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < min_seconds);
    best = std::min(best, elapsed * 1e6 / static_cast<double>(plans * loads.num_layers));
  }
  return best;
}

PlacementConfig config_for(int slots, int gpus, int nodes, int groups, bool refine,
                           PlacementSearch search = PlacementSearch::kAuto) {
  PlacementConfig config;
  config.search = search;
  config.num_physical_experts = slots;
  config.num_gpus = gpus;
  config.num_nodes = nodes;
  config.num_groups = groups;
  config.policy = nodes > 1 ? PlacementPolicy::kHierarchical : PlacementPolicy::kGlobal;
  config.refine_packing = refine;
  return config;
}

// Expert copies per layer needed to go from `current` to `target` taking the planner's GPU
// numbering as it is: each distinct expert of a target GPU that the same GPU lacks now.
double naive_moves_per_layer(const ExpertPlacement& current, const ExpertPlacement& target) {
  int64_t moves = 0;
  const int old_slots = current.slots_per_gpu(), new_slots = target.slots_per_gpu();
  for (int layer = 0; layer < target.num_layers; ++layer) {
    const auto old_phy2log = current.phy2log(layer);
    const auto new_phy2log = target.phy2log(layer);
    for (int gpu = 0; gpu < target.num_gpus; ++gpu) {
      std::vector<int32_t> wanted(new_phy2log.begin() + gpu * new_slots,
                                  new_phy2log.begin() + (gpu + 1) * new_slots);
      std::sort(wanted.begin(), wanted.end());
      wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
      for (int32_t expert : wanted) {
        const auto first = old_phy2log.begin() + gpu * old_slots;
        moves += std::find(first, first + old_slots, expert) == first + old_slots ? 1 : 0;
      }
    }
  }
  return static_cast<double>(moves) / target.num_layers;
}

// Re-planning costs weight copies. For Zipf 1.0 loads: the same router on another step (only
// sampling noise changes) and a router whose hot experts changed. Copies per layer of a fresh
// plan (renumbered by plan_expert_migration, and with the planner's numbering as it is) and of
// an incremental plan from the running placement, with the max/mean each reaches.
void print_migration_table(const BenchSettings& settings) {
  std::printf(
      "\nRe-planning and migration (Zipf 1.0, default planner, incremental bound 1.02): "
      "expert copies per layer and worst max/mean over layers\n\n");
  std::printf(
      "| experts | GPUs | slots | new loads | fresh: copies (naive numbering) | fresh: "
      "max/mean | incremental: copies | incremental: max/mean | migration planning "
      "us/layer |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    int experts, gpus, slots;
  };
  for (const Shape& shape : {Shape{64, 8, 80}, Shape{256, 8, 320}, Shape{256, 64, 320}}) {
    const PlacementConfig config = config_for(shape.slots, shape.gpus, 1, 1, true);
    auto loads_of = [&](uint32_t ranking_seed, uint32_t sampling_seed) {
      return sampled_zipf_loads(settings.num_layers, shape.experts, 1.0, settings.tokens_per_layer,
                                ranking_seed, sampling_seed);
    };
    const ExpertPlacement current =
        moescope::balancer::plan_expert_placement(loads_of(7, 100), config);
    struct Scenario {
      const char* name;
      ExpertLoads loads;
    };
    for (const Scenario& scenario : {Scenario{"same hot experts", loads_of(7, 101)},
                                     Scenario{"new hot experts", loads_of(8, 102)}}) {
      const ExpertPlacement fresh =
          moescope::balancer::plan_expert_placement(scenario.loads, config);
      const ExpertPlacement incremental =
          moescope::balancer::plan_expert_placement_incremental(scenario.loads, config, current);
      const auto fresh_migration = moescope::balancer::plan_expert_migration(current, fresh);
      const auto incremental_migration =
          moescope::balancer::plan_expert_migration(current, incremental);

      using clock = ThreadCpuClock;
      double best_us = 1e300;
      for (int trial = 0; trial < 3; ++trial) {
        int64_t runs = 0;
        const auto start = clock::now();
        double elapsed = 0.0;
        do {
          if (moescope::balancer::plan_expert_migration(current, fresh).placement.num_layers == 0)
            std::abort();
          ++runs;
          elapsed = std::chrono::duration<double>(clock::now() - start).count();
        } while (elapsed < settings.min_seconds);
        best_us =
            std::min(best_us, elapsed * 1e6 / static_cast<double>(runs * settings.num_layers));
      }
      const double layers = settings.num_layers;
      std::printf("| %d | %d | %d | %s | %.1f (%.1f) | %.3f | %.1f | %.3f | %.1f |\n",
                  shape.experts, shape.gpus, shape.slots, scenario.name,
                  static_cast<double>(fresh_migration.moves.size()) / layers,
                  naive_moves_per_layer(current, fresh),
                  planned_balance(scenario.loads, fresh).worst,
                  static_cast<double>(incremental_migration.moves.size()) / layers,
                  planned_balance(scenario.loads, incremental).worst, best_us);
    }
  }
}

// Per-layer planning time of one plan, in microseconds: the best of 5 runs.
double microseconds_per_plan(const ExpertLoads& loads, const PlacementConfig& config) {
  using clock = ThreadCpuClock;
  double best = 1e300;
  for (int run = 0; run < 5; ++run) {
    const auto start = clock::now();
    const ExpertPlacement placement = moescope::balancer::plan_expert_placement(loads, config);
    if (placement.physical_to_logical.empty()) std::abort();
    best = std::min(best, std::chrono::duration<double, std::micro>(clock::now() - start).count());
  }
  return best / loads.num_layers;
}

double mean_of(const std::vector<double>& values) {
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double worst_of(const std::vector<double>& values) {
  return *std::max_element(values.begin(), values.end());
}

// Small skewed layers, where the greedy leaves most room: the case (the demo's skewed
// run, layer 1), seeded random layers of 4-12 experts on 2-4 GPUs with 1-4 extra slots in four
// shapes, and two medium shapes. max/mean of each plan, the exact optimum (exhaustive search,
// where it finishes) and the default search's planning time.
void print_small_layers_table() {
  std::printf(
      "\nSmall layers: max/mean per-GPU load, mean (worst) over the cases; optimum = exhaustive "
      "search (proven optimal on n/N cases)\n\n");
  std::printf(
      "| layers | cases | greedy | refined | search | optimum | search = optimum | search "
      "us/layer mean (max) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct Case {
    ExpertLoads loads;
    int slots, gpus;
  };
  auto report_row = [](const std::string& name, const std::vector<Case>& cases, bool with_optimum) {
    std::vector<double> greedy, refined, searched, optimum, micros;
    int proven = 0, equal = 0;
    for (const Case& c : cases) {
      auto ratio = [&](const ExpertPlacement& placement) {
        return planned_balance(c.loads, placement).mean;
      };
      const PlacementConfig search_config = config_for(c.slots, c.gpus, 1, 1, true);
      greedy.push_back(ratio(moescope::balancer::plan_expert_placement(
          c.loads, config_for(c.slots, c.gpus, 1, 1, false))));
      refined.push_back(ratio(moescope::balancer::plan_expert_placement(
          c.loads, config_for(c.slots, c.gpus, 1, 1, true, PlacementSearch::kNone))));
      searched.push_back(ratio(moescope::balancer::plan_expert_placement(c.loads, search_config)));
      micros.push_back(microseconds_per_plan(c.loads, search_config));
      if (with_optimum) {
        PlacementSearchReport report;
        optimum.push_back(ratio(moescope::balancer::plan_expert_placement(
            c.loads, config_for(c.slots, c.gpus, 1, 1, true, PlacementSearch::kExhaustive),
            &report)));
        proven += report.proven_optimal[0];
        equal += searched.back() <= optimum.back() * (1 + 1e-9) ? 1 : 0;
      }
    }
    char optimum_text[64] = "-", equal_text[32] = "-";
    if (with_optimum) {
      std::snprintf(optimum_text, sizeof(optimum_text), "%.4f (%.4f) [%d/%zu]", mean_of(optimum),
                    worst_of(optimum), proven, cases.size());
      std::snprintf(equal_text, sizeof(equal_text), "%d/%zu", equal, cases.size());
    }
    std::printf("| %s | %zu | %.4f (%.4f) | %.4f (%.4f) | %.4f (%.4f) | %s | %s | %.1f (%.1f) |\n",
                name.c_str(), cases.size(), mean_of(greedy), worst_of(greedy), mean_of(refined),
                worst_of(refined), mean_of(searched), worst_of(searched), optimum_text, equal_text,
                mean_of(micros), worst_of(micros));
  };
  report_row("issue: 619 1768 1691 17 0 0 0 0, 2 GPUs, 10 slots",
             {Case{ExpertLoads{1, 8, {619, 1768, 1691, 17, 0, 0, 0, 0}}, 10, 2}}, true);

  std::mt19937_64 random(20261203);
  for (const char* shape : {"zipf 0.6-1.6", "one hot expert", "two hot experts", "idle experts"}) {
    std::vector<Case> cases;
    while (cases.size() < 40) {
      const int gpus = std::uniform_int_distribution<int>(2, 4)(random);
      const int experts = std::uniform_int_distribution<int>(4, 12)(random);
      const int slots = experts + std::uniform_int_distribution<int>(1, 4)(random);
      if (slots % gpus != 0) continue;
      std::vector<double> loads(static_cast<size_t>(experts));
      std::uniform_real_distribution<double> jitter(0.7, 1.3);
      const std::string kind = shape;
      const double exponent = std::uniform_real_distribution<double>(0.6, 1.6)(random);
      for (int e = 0; e < experts; ++e) {
        loads[static_cast<size_t>(e)] =
            kind.starts_with("zipf")
                ? std::floor(3000.0 / std::pow(e + 1, exponent) * jitter(random))
                : std::floor(150.0 * jitter(random));
      }
      std::uniform_int_distribution<int> any_expert(0, experts - 1);
      if (kind == "one hot expert" || kind == "two hot experts" || kind == "idle experts") {
        loads[static_cast<size_t>(any_expert(random))] = std::floor(1500.0 * jitter(random));
      }
      if (kind == "two hot experts") {
        loads[static_cast<size_t>(any_expert(random))] = std::floor(1200.0 * jitter(random));
      }
      if (kind == "idle experts") {
        for (int e = 0; e < experts / 2; ++e) loads[static_cast<size_t>(any_expert(random))] = 0;
      }
      cases.push_back({ExpertLoads{1, experts, loads}, slots, gpus});
    }
    report_row(shape, cases, true);
  }
  for (double exponent : {1.0, 1.2}) {
    for (const auto& [experts, gpus, slots] : {std::tuple{16, 4, 20}, std::tuple{32, 8, 40}}) {
      std::vector<Case> cases;
      for (uint32_t seed = 1; seed <= 20; ++seed) {
        cases.push_back(
            {sampled_zipf_loads(1, experts, exponent, 4096, seed, seed + 100), slots, gpus});
      }
      char name[96];
      std::snprintf(name, sizeof(name), "zipf %.1f, %d experts, %d GPUs, %d slots", exponent,
                    experts, gpus, slots);
      report_row(name, cases, false);
    }
  }
}

// How fast expert popularity wanders: each step every expert's log-weight offset d becomes
// keep x d + N(0, step_noise) (an Ornstein-Uhlenbeck walk around its Zipf base).
struct Drift {
  const char* name;
  double keep;
  double step_noise;
};

// Expert popularity that drifts: per layer and expert a log-weight -s log(rank) plus the drift
// offset, tokens per step sampled from the resulting distribution. Returns [windows] loads, each
// the mean over window_steps steps: [layers, experts].
std::vector<ExpertLoads> drifting_windows(int layers, int experts, double exponent,
                                          int tokens_per_step, int window_steps, int windows,
                                          const Drift& drift_model, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::normal_distribution<double> noise(0.0, drift_model.step_noise);
  std::vector<std::vector<double>> base(static_cast<size_t>(layers)),
      drift(static_cast<size_t>(layers), std::vector<double>(static_cast<size_t>(experts), 0.0));
  for (auto& row : base) {
    std::vector<int> rank(static_cast<size_t>(experts));
    std::iota(rank.begin(), rank.end(), 1);
    std::shuffle(rank.begin(), rank.end(), random);
    for (int r : rank) row.push_back(-exponent * std::log(static_cast<double>(r)));
  }
  std::vector<ExpertLoads> result;
  for (int w = 0; w < windows; ++w) {
    ExpertLoads window{layers, experts,
                       std::vector<double>(static_cast<size_t>(layers) * experts, 0.0)};
    for (int step = 0; step < window_steps; ++step) {
      for (int layer = 0; layer < layers; ++layer) {
        std::vector<double> weight(static_cast<size_t>(experts));
        for (int e = 0; e < experts; ++e) {
          double& d = drift[static_cast<size_t>(layer)][static_cast<size_t>(e)];
          d = drift_model.keep * d + noise(random);
          weight[static_cast<size_t>(e)] =
              std::exp(base[static_cast<size_t>(layer)][static_cast<size_t>(e)] + d);
        }
        std::discrete_distribution<int> pick(weight.begin(), weight.end());
        double* row = window.values.data() + static_cast<size_t>(layer) * experts;
        for (int t = 0; t < tokens_per_step; ++t) row[pick(random)] += 1.0 / window_steps;
      }
    }
    result.push_back(std::move(window));
  }
  return result;
}

// A plan made from one window's loads, scored on the same window and on the next one.
void print_next_window_table() {
  constexpr int kLayers = 8, kWindowSteps = 10, kWindows = 12;
  std::printf(
      "\nNext window (synthetic drift, %d layers, %d windows of %d steps): plan on window w, "
      "max/mean on window w (same) and w+1 (next), mean (worst) over layers and windows\n\n",
      kLayers, kWindows, kWindowSteps);
  std::printf(
      "| drift | experts | GPUs | slots | zipf | tokens/step | greedy same | greedy next | search "
      "same | search next |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  struct Shape {
    int experts, gpus, slots;
    double exponent;
    int tokens;
  };
  for (const Drift& drift :
       {Drift{"slow (0.99, 0.02)", 0.99, 0.02}, Drift{"fast (0.95, 0.08)", 0.95, 0.08}}) {
    for (const Shape& shape : {Shape{8, 2, 10, 1.2, 4096}, Shape{16, 4, 20, 1.0, 4096},
                               Shape{64, 8, 80, 1.0, 16384}, Shape{256, 64, 320, 1.0, 16384}}) {
      const std::vector<ExpertLoads> windows = drifting_windows(
          kLayers, shape.experts, shape.exponent, shape.tokens, kWindowSteps, kWindows, drift,
          static_cast<uint64_t>(shape.experts * 7919 + shape.gpus));
      std::vector<double> ratios[4];  // greedy same, greedy next, search same, search next
      for (int w = 0; w + 1 < kWindows; ++w) {
        for (int variant = 0; variant < 2; ++variant) {
          const PlacementConfig config = variant == 0
                                             ? config_for(shape.slots, shape.gpus, 1, 1, false)
                                             : config_for(shape.slots, shape.gpus, 1, 1, true);
          const ExpertPlacement plan =
              moescope::balancer::plan_expert_placement(windows[static_cast<size_t>(w)], config);
          for (int next = 0; next < 2; ++next) {
            const ExpertLoads& scored = windows[static_cast<size_t>(w + next)];
            for (int layer = 0; layer < kLayers; ++layer) {
              ratios[variant * 2 + next].push_back(
                  moescope::balancer::summarize_gpu_loads(
                      moescope::balancer::gpu_loads_of_placement(scored.layer(layer), plan, layer))
                      .max_over_mean());
            }
          }
        }
      }
      std::printf(
          "| %s | %d | %d | %d | %.1f | %d | %.4f (%.4f) | %.4f (%.4f) | %.4f (%.4f) | %.4f (%.4f) "
          "|\n",
          drift.name, shape.experts, shape.gpus, shape.slots, shape.exponent, shape.tokens,
          mean_of(ratios[0]), worst_of(ratios[0]), mean_of(ratios[1]), worst_of(ratios[1]),
          mean_of(ratios[2]), worst_of(ratios[2]), mean_of(ratios[3]), worst_of(ratios[3]));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  BenchSettings settings;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--layers") == 0) {
      settings.num_layers = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--tokens") == 0) {
      settings.tokens_per_layer = std::atoi(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--min-seconds") == 0) {
      settings.min_seconds = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: planner_bench [--layers N] [--tokens T] [--min-seconds S]\n");
      return 2;
    }
  }
  if (settings.num_layers <= 0 || settings.tokens_per_layer <= 0 || settings.min_seconds <= 0) {
    std::fprintf(stderr, "planner_bench: --layers, --tokens and --min-seconds must be positive\n");
    return 2;
  }

  std::printf(
      "planner_bench: %d layers per shape, %d routed tokens per layer sampled from "
      "Zipf; max/mean per-GPU load as mean (worst) over layers\n\n",
      settings.num_layers, settings.tokens_per_layer);
  std::printf(
      "| zipf | experts | GPUs | slots (redundant) | identity | greedy | refined | search | "
      "bound | search at bound | hierarchical | greedy us/layer | refined us/layer | search "
      "us/layer | hierarchical us/layer |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");

  bool balance_target_met = true;
  double worst_zipf1_balance = 0.0;
  double time_64_on_8 = 0.0, time_256_on_64 = 0.0;
  for (double exponent : {0.8, 1.0, 1.2}) {
    for (int experts : {64, 256}) {
      for (int gpus : {8, 64}) {
        // 25% redundant slots, rounded up to whole slots per GPU.
        const int slots_per_gpu = (experts * 5 / 4 + gpus - 1) / gpus;
        const int slots = slots_per_gpu * gpus;
        const ExpertLoads loads =
            sampled_zipf_loads(settings.num_layers, experts, exponent, settings.tokens_per_layer,
                               static_cast<uint32_t>(experts * 1000 + gpus * 10 + exponent * 10),
                               static_cast<uint32_t>(experts * 1000 + gpus * 10 + exponent * 10));
        const Balance identity = balance_over_layers(loads, [&](int layer) {
          return moescope::balancer::gpu_loads_without_replicas(loads.layer(layer), gpus);
        });
        const PlacementConfig greedy_config = config_for(slots, gpus, 1, 1, false);
        const PlacementConfig refined_config =
            config_for(slots, gpus, 1, 1, true, PlacementSearch::kNone);
        const PlacementConfig search_config = config_for(slots, gpus, 1, 1, true);
        const Balance greedy =
            planned_balance(loads, moescope::balancer::plan_expert_placement(loads, greedy_config));
        const Balance refined = planned_balance(
            loads, moescope::balancer::plan_expert_placement(loads, refined_config));
        PlacementSearchReport report;
        const Balance searched = planned_balance(
            loads, moescope::balancer::plan_expert_placement(loads, search_config, &report));
        Balance bound;
        int at_bound = 0;
        for (int layer = 0; layer < loads.num_layers; ++layer) {
          const double total =
              std::accumulate(loads.layer(layer).begin(), loads.layer(layer).end(), 0.0);
          const double ratio = report.lower_bound[static_cast<size_t>(layer)] / (total / gpus);
          bound.mean += ratio / loads.num_layers;
          bound.worst = std::max(bound.worst, ratio);
          at_bound += report.proven_optimal[static_cast<size_t>(layer)];
        }
        const double greedy_us = microseconds_per_layer(loads, greedy_config, settings.min_seconds);
        const double refined_us =
            microseconds_per_layer(loads, refined_config, settings.min_seconds);
        const double search_us = microseconds_per_layer(loads, search_config, settings.min_seconds);

        std::string hierarchical_text = "-", hierarchical_time = "-";
        if (gpus >= 16) {
          const PlacementConfig hierarchical_config = config_for(slots, gpus, gpus / 8, 8, true);
          const Balance hierarchical = planned_balance(
              loads, moescope::balancer::plan_expert_placement(loads, hierarchical_config));
          char text[64];
          std::snprintf(text, sizeof(text), "%.3f (%.3f)", hierarchical.mean, hierarchical.worst);
          hierarchical_text = text;
          std::snprintf(text, sizeof(text), "%.1f",
                        microseconds_per_layer(loads, hierarchical_config, settings.min_seconds));
          hierarchical_time = text;
        }
        const int redundant = slots - experts;
        std::printf(
            "| %.1f | %d | %d | %d (%d%%) | %.3f (%.3f) | %.3f (%.3f) | %.3f (%.3f) | %.4f (%.4f) "
            "| %.4f (%.4f) | %d/%d | %s | %.1f | %.1f | %.1f | %s |\n",
            exponent, experts, gpus, slots, redundant * 100 / experts, identity.mean,
            identity.worst, greedy.mean, greedy.worst, refined.mean, refined.worst, searched.mean,
            searched.worst, bound.mean, bound.worst, at_bound, loads.num_layers,
            hierarchical_text.c_str(), greedy_us, refined_us, search_us, hierarchical_time.c_str());
        if (exponent == 1.0 && redundant * 4 == experts) {
          worst_zipf1_balance = std::max(worst_zipf1_balance, searched.worst);
          balance_target_met = balance_target_met && searched.worst <= 1.05;
        }
        if (experts == 64 && gpus == 8) time_64_on_8 = std::max(time_64_on_8, search_us);
        if (experts == 256 && gpus == 64) time_256_on_64 = std::max(time_256_on_64, search_us);
      }
    }
  }
  std::printf(
      "\ntarget: max/mean <= 1.05 for Zipf 1.0 at 25%% redundancy (search, worst layer): "
      "%.3f -> %s\n",
      worst_zipf1_balance, balance_target_met ? "met" : "NOT met");
  std::printf(
      "target: < 1000 us per layer for 64 experts on 8 GPUs (search, slowest Zipf): %.1f us -> "
      "%s\n",
      time_64_on_8, time_64_on_8 < 1000.0 ? "met" : "NOT met");
  std::printf(
      "target: < 10000 us per layer for 256 experts on 64 GPUs (search, slowest Zipf): %.1f us "
      "-> %s\n",
      time_256_on_64, time_256_on_64 < 10000.0 ? "met" : "NOT met");
  print_small_layers_table();
  print_next_window_table();
  print_migration_table(settings);
  return 0;
}
