// Next-window balance on recorded expert loads (docs/performance.md, "Next window on recorded
// loads"; issue 32): for each run (a folder of run.<rank>.moetrace files), per-step tokens per
// expert (analysis::layer_step_loads), cut into windows of W steps. Before each window the
// forecast is the balancer's EMA forecaster fed every earlier step (the rebalancer's), and its
// errors are those of the last K windows (window mean - the forecast made before it). Three
// plans of the forecast are scored on the window that follows, by max/mean per-GPU load
// (mean over layers): EPLB's greedy, the default search, and plan_for_next_window over the
// forecast's scenarios. Prints one row per run and the windows where a plan was worse than the
// greedy.
//   next_window_bench GPUS SLOTS WINDOW_STEPS RUN_FOLDER...
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/balancer/expert_placement.h"
#include "moescope/balancer/load_predictor.h"
#include "moescope/balancer/next_window_placement.h"

namespace {

using moescope::balancer::ExpertLoads;
using moescope::balancer::ExpertPlacement;

constexpr int kErrorWindows = 4;  // the forecast's recent errors kept as scenarios

std::vector<std::string> rank_traces(const std::string& folder) {
  std::vector<std::string> paths;
  const std::regex rank_file(R"(run\.[0-9]+\.moetrace)");
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (std::regex_match(entry.path().filename().string(), rank_file)) {
      paths.push_back(entry.path().string());
    }
  }
  return paths;
}

// [steps] of [layers x experts] tokens, the steps every layer has.
std::vector<ExpertLoads> loads_by_step(const std::string& folder) {
  const auto model = moescope::analysis::load_traces(rank_traces(folder));
  std::map<int64_t, std::map<uint32_t, std::vector<double>>> by_step;
  std::map<uint32_t, bool> layers;
  for (const auto& load : moescope::analysis::layer_step_loads(model)) {
    by_step[load.step][load.layer] = load.tokens;
    layers[load.layer] = true;
  }
  std::vector<ExpertLoads> steps;
  for (const auto& [step, per_layer] : by_step) {
    if (per_layer.size() != layers.size()) continue;
    ExpertLoads loads;
    loads.num_layers = int(per_layer.size());
    loads.num_experts = int(per_layer.begin()->second.size());
    for (const auto& [layer, tokens] : per_layer) {
      if (int(tokens.size()) != loads.num_experts) return {};
      loads.values.insert(loads.values.end(), tokens.begin(), tokens.end());
    }
    steps.push_back(std::move(loads));
  }
  return steps;
}

ExpertLoads window_mean(const std::vector<ExpertLoads>& steps, size_t first, size_t count) {
  ExpertLoads mean = steps[first];
  std::fill(mean.values.begin(), mean.values.end(), 0.0);
  for (size_t s = first; s < first + count; ++s) {
    for (size_t i = 0; i < mean.values.size(); ++i) {
      mean.values[i] += steps[s].values[i] / double(count);
    }
  }
  return mean;
}

double balance(const ExpertPlacement& plan, const ExpertLoads& actual) {
  double sum = 0;
  for (int layer = 0; layer < actual.num_layers; ++layer) {
    sum += moescope::balancer::summarize_gpu_loads(
               moescope::balancer::gpu_loads_of_placement(actual.layer(layer), plan, layer))
               .max_over_mean();
  }
  return sum / actual.num_layers;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s GPUS SLOTS WINDOW_STEPS RUN_FOLDER...\n", argv[0]);
    return 2;
  }
  moescope::balancer::PlacementConfig search;
  search.num_gpus = std::atoi(argv[1]);
  search.num_physical_experts = std::atoi(argv[2]);
  const size_t window = size_t(std::atoi(argv[3]));
  moescope::balancer::PlacementConfig greedy = search;
  greedy.refine_packing = false;
  greedy.search = moescope::balancer::PlacementSearch::kNone;
  std::printf(
      "| run | steps | windows scored | greedy next | search next | scenarios next | scenarios "
      "worse than greedy | search worse than greedy |\n|---|---|---|---|---|---|---|---|\n");
  for (int a = 4; a < argc; ++a) {
    const std::vector<ExpertLoads> steps = loads_by_step(argv[a]);
    if (steps.empty() || window == 0) {
      std::printf("| %s | no expert loads |\n", argv[a]);
      continue;
    }
    moescope::balancer::ExpertLoadForecaster forecaster(steps[0].num_layers, steps[0].num_experts,
                                                        {}, int(window));
    std::vector<ExpertLoads> errors;
    double sum_greedy = 0, sum_search = 0, sum_scenarios = 0;
    int scored = 0, scenarios_worse = 0, search_worse = 0;
    for (size_t first = 0; first + window <= steps.size(); first += window) {
      const ExpertLoads actual = window_mean(steps, first, window);
      if (first > 0) {  // a forecast exists: plan on it, score on this window
        const ExpertLoads forecast = forecaster.predict_all();
        const std::vector<ExpertLoads> scenarios =
            moescope::balancer::forecast_scenarios(forecast, errors);
        const double g =
            balance(moescope::balancer::plan_expert_placement(forecast, greedy), actual);
        const double s =
            balance(moescope::balancer::plan_expert_placement(forecast, search), actual);
        const double n =
            balance(moescope::balancer::plan_for_next_window(scenarios, search), actual);
        sum_greedy += g, sum_search += s, sum_scenarios += n, ++scored;
        scenarios_worse += n > g + 1e-9 ? 1 : 0;
        search_worse += s > g + 1e-9 ? 1 : 0;
        ExpertLoads error = actual;
        for (size_t i = 0; i < error.values.size(); ++i) error.values[i] -= forecast.values[i];
        errors.push_back(std::move(error));
        if (errors.size() > size_t(kErrorWindows)) errors.erase(errors.begin());
      }
      for (size_t s = first; s < first + window; ++s) {
        for (int layer = 0; layer < steps[s].num_layers; ++layer) {
          forecaster.observe(layer, steps[s].layer(layer));
        }
      }
    }
    if (scored == 0) {
      std::printf("| %s | %zu | 0 (fewer than 2 windows) |\n", argv[a], steps.size());
      continue;
    }
    std::printf("| %s | %zu | %d | %.4f | %.4f | %.4f | %d | %d |\n", argv[a], steps.size(), scored,
                sum_greedy / scored, sum_search / scored, sum_scenarios / scored, scenarios_worse,
                search_worse);
  }
  return 0;
}
