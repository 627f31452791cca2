// libFuzzer target: the JSON files `moescope plan --current` and `moescope diff --predicted`
// read back (profiler/cli/plan_inputs.h), each followed to where the commands use it: the
// prediction into check_prediction and the diff's rendering, the placement into the balancer's
// tables. An unusable file must give std::runtime_error naming the file; nothing may crash,
// overflow or allocate without bound.
//
// With MOESCOPE_FUZZ_PLAN_SEEDS=DIR set, LLVMFuzzerInitialize writes a valid plan file (a
// placement with its prediction, as `plan --json` writes it) into DIR first.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_pipeline.h"
#include "json_mutator.h"
#include "moescope/analysis/run_diff.h"
#include "plan_inputs.h"

namespace {

using nlohmann::json;

void write_seed(const std::string& directory) {
  moescope::analysis::PlacementPrediction prediction;
  prediction.cost.valid = true;
  prediction.cost.fixed_ms = 0.2;
  prediction.cost.ms_per_row = 0.001;
  prediction.cost.r_squared = 0.9;
  prediction.cost.samples = 40;
  prediction.layers = {0, 1};
  prediction.step_ms_before = 12.5;
  prediction.step_ms_change = -1.5;
  for (int32_t rank = 0; rank < 2; ++rank) {
    moescope::analysis::RankPrediction entry;
    entry.rank = rank;
    entry.rows_before = {100.0 + rank, 90.0};
    entry.rows_after = {95.0, 95.0};
    entry.busy_ms_before = 10.0;
    entry.busy_ms_after = 9.0;
    entry.expert_ms_before = 0.3;
    entry.expert_ms_after = 0.28;
    prediction.ranks.push_back(entry);
  }
  json plan = {{"num_gpus", 2},
               {"num_logical_experts", 4},
               {"layers", {{{"phy2log", {0, 1, 2, 3}}}, {{"phy2log", {3, 2, 1, 0, 1, 2}}}}},
               {"prediction", json::parse(moescope::analysis::prediction_to_json(prediction))}};
  const std::string text = plan.dump(2);
  moescope::fuzz::write_file(directory + "/plan.json", text.data(), text.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* directory = std::getenv("MOESCOPE_FUZZ_PLAN_SEEDS")) write_seed(directory);
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  static const std::vector<std::string> kKeys = {"num_gpus",
                                                 "num_logical_experts",
                                                 "layers",
                                                 "phy2log",
                                                 "prediction",
                                                 "cost_model",
                                                 "fixed_ms",
                                                 "ms_per_row",
                                                 "r_squared",
                                                 "samples",
                                                 "ranks",
                                                 "rank",
                                                 "rows_before",
                                                 "rows_after",
                                                 "busy_ms_before",
                                                 "busy_ms_after",
                                                 "expert_ms_before",
                                                 "expert_ms_after",
                                                 "step_ms_before",
                                                 "step_ms_change"};
  return moescope::fuzz::mutate_json_input(data, size, max_size, seed, kKeys, {});
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    moescope::analysis::PlacementPrediction prediction =
        moescope::cli::prediction_from_plan_text(text, "fuzz.json");
    static const moescope::analysis::TraceModel empty;
    moescope::analysis::RunDiff diff = moescope::analysis::diff_runs(empty, empty);
    moescope::analysis::check_prediction(diff, empty, std::move(prediction));
    (void)moescope::analysis::render_diff(diff, moescope::analysis::DiffFormat::kText);
    (void)moescope::analysis::render_diff(diff, moescope::analysis::DiffFormat::kJson);
  } catch (const std::runtime_error&) {
  }
  // The placement against the loads it was planned for, and against others.
  for (auto [layers, experts, gpus] : {std::tuple{2, 4, 2}, std::tuple{1, 8, 4}}) {
    moescope::balancer::ExpertLoads loads;
    loads.num_layers = layers;
    loads.num_experts = experts;
    loads.values.assign(size_t(layers) * experts, 1.0);
    try {
      (void)moescope::cli::placement_from_plan_text(text, "fuzz.json", loads, gpus);
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
