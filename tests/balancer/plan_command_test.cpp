// `moescope plan` end to end: the built binary on small JSON and CSV loads files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "moescope/recorder.h"

namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

class PlanCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* build_dir = std::getenv("MOESCOPE_BUILD_DIR");
    ASSERT_NE(build_dir, nullptr) << "MOESCOPE_BUILD_DIR is not set (run through ctest)";
    binary_ = std::filesystem::path(build_dir) / "bin" / "moescope";
    ASSERT_TRUE(std::filesystem::exists(binary_)) << binary_ << " was not built";
    dir_ = std::filesystem::temp_directory_path() /
           ("moescope_plan_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }

  CommandResult run(const std::string& arguments) {
    const auto out_path = dir_ / "stdout.txt";
    const auto err_path = dir_ / "stderr.txt";
    const std::string command = binary_.string() + " plan " + arguments + " >" + out_path.string() +
                                " 2>" + err_path.string();
    const int status = std::system(command.c_str());
    CommandResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = read_text(out_path);
    result.err = read_text(err_path);
    return result;
  }

  std::filesystem::path binary_;
  std::filesystem::path dir_;
};

// Layer 0: loads 8 4 2 2 on 2 GPUs. Without replicas GPU 0 holds experts 0-1 (12) and GPU 1
// experts 2-3 (4): max/mean 12/8. With 6 slots expert 0 gets 3 replicas of 8/3 and the refined
// packing reaches 8 and 8; the plain greedy stops at 26/3 (max/mean 1.0833).
// Layer 1: 1 1 1 1 is balanced before (2, 2) and after.
constexpr const char* kLoadsJson = "[[8, 4, 2, 2], [1, 1, 1, 1]]";

TEST_F(PlanCommand, PrintsPlacementAndBalanceFromJson) {
  const CommandResult result = run("--gpus 2 --slots 6 --loads " + write("loads.json", kLoadsJson));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("plan: 2 layers x 4 experts -> 6 slots on 2 GPUs (3 per GPU), 1 node, "
                            "1 group, policy global, refined packing"),
            std::string::npos)
      << result.out;
  EXPECT_NE(
      result.out.find("layer 0: max/mean per-GPU load 1.5000 -> 1.0000 (max 12 -> 8, mean 8)"),
      std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("  gpu 0 load 8:"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  gpu 1 load 8:"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  replicated: 0x3\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("layer 1: max/mean per-GPU load 1.0000 -> 1.0000 (max 2 -> 2, mean 2)"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("all layers: max/mean per-GPU load mean 1.2500 -> 1.0000, worst "
                            "1.5000 -> 1.0000"),
            std::string::npos)
      << result.out;

  const CommandResult greedy =
      run("--gpus 2 --slots 6 --greedy --loads " + write("loads.json", kLoadsJson));
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_NE(greedy.out.find("layer 0: max/mean per-GPU load 1.5000 -> 1.0833"), std::string::npos)
      << greedy.out;
}

TEST_F(PlanCommand, SearchFindsTheBalanceTheGreedyMisses) {
  // The demo's skewed layer (issue 23): replicating the two hottest experts packs to 1.128; the
  // optimum 1.0147 splits expert 0 (619) in two and keeps 1 and 2 whole on separate GPUs.
  const std::string loads = write("skewed.json", "[619, 1768, 1691, 17, 0, 0, 0, 0]");
  const CommandResult greedy = run("--gpus 2 --slots 10 --search none --loads " + loads);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_NE(greedy.out.find("refined packing, search none"), std::string::npos) << greedy.out;
  EXPECT_NE(greedy.out.find("layer 0: max/mean per-GPU load 2.0000 -> 1.1282"), std::string::npos)
      << greedy.out;

  const std::string json_path = (dir_ / "searched.json").string();
  const CommandResult searched = run("--gpus 2 --slots 10 --loads " + loads);
  ASSERT_EQ(searched.exit_code, 0) << searched.err;
  EXPECT_NE(searched.out.find("refined packing, search auto"), std::string::npos) << searched.out;
  EXPECT_NE(searched.out.find("layer 0: max/mean per-GPU load 2.0000 -> 1.0147 (max 4095 -> "
                              "2077.5, mean 2047.5), optimal"),
            std::string::npos)
      << searched.out;
  EXPECT_NE(searched.out.find("replicated: 0x2"), std::string::npos) << searched.out;

  ASSERT_EQ(run("--gpus 2 --slots 10 --search exhaustive --json " + json_path + " --loads " + loads)
                .exit_code,
            0);
  const nlohmann::json plan = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(plan["search"], "exhaustive");
  EXPECT_EQ(plan["layers"][0]["proven_optimal"], true);
  EXPECT_NEAR(plan["layers"][0]["max_over_mean_after"].get<double>(), 2077.5 / 2047.5, 1e-12);
  EXPECT_LE(plan["layers"][0]["lower_bound_max_over_mean"].get<double>(),
            plan["layers"][0]["max_over_mean_after"].get<double>());

  const CommandResult bad = run("--gpus 2 --slots 10 --search best --loads " + loads);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--search"), std::string::npos) << bad.err;
}

TEST_F(PlanCommand, HierarchicalPolicyKeepsGroupsOnTheirNode) {
  // 8 experts in 4 groups of 2 on 2 nodes of 2 GPUs, 12 slots (6 per node, 3 per GPU).
  // Group loads 20, 10, 6, 4: balanced packing puts groups 0 + 3 (24) on one node and
  // 1 + 2 (16) on the other.
  const std::string loads = write("h.json", "[[16, 4, 5, 5, 3, 3, 2, 2]]");
  const std::string json_path = (dir_ / "h_plan.json").string();
  const CommandResult result =
      run("--gpus 4 --slots 12 --nodes 2 --groups 4 --json " + json_path + " --loads " + loads);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("2 nodes, 4 groups, policy hierarchical"), std::string::npos)
      << result.out;
  const nlohmann::json plan = nlohmann::json::parse(read_text(json_path));
  const auto phy2log = plan["layers"][0]["phy2log"].get<std::vector<int>>();
  ASSERT_EQ(phy2log.size(), 12u);
  std::vector<int> node_of_group(4, -1);
  for (size_t slot = 0; slot < phy2log.size(); ++slot) {
    const int group = phy2log[slot] / 2;
    const int node = static_cast<int>(slot / 6);
    if (node_of_group[static_cast<size_t>(group)] < 0)
      node_of_group[static_cast<size_t>(group)] = node;
    EXPECT_EQ(node_of_group[static_cast<size_t>(group)], node) << "group " << group;
  }
  EXPECT_EQ(node_of_group[0], node_of_group[3]);
  EXPECT_EQ(node_of_group[1], node_of_group[2]);
  EXPECT_NE(node_of_group[0], node_of_group[1]);
}

TEST_F(PlanCommand, WritesConsistentJsonFromCsv) {
  const std::string csv = write("loads.csv", "e0,e1,e2,e3\n8,4,2,2\n1,1,1,1\n");
  const std::string json_path = (dir_ / "plan.json").string();
  const CommandResult result = run("--gpus 2 --slots 6 --json " + json_path + " --loads " + csv);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("placement written to " + json_path), std::string::npos);
  EXPECT_EQ(result.out.find("  gpu 0 load"), std::string::npos) << "JSON mode prints no slots";

  const nlohmann::json plan = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(plan["num_layers"], 2);
  EXPECT_EQ(plan["num_physical_experts"], 6);
  EXPECT_EQ(plan["max_replicas"], 3);
  const auto& layer0 = plan["layers"][0];
  EXPECT_EQ(layer0["logcnt"], nlohmann::json({3, 1, 1, 1}));
  EXPECT_EQ(layer0["gpu_loads_before"], nlohmann::json({12.0, 4.0}));
  EXPECT_DOUBLE_EQ(layer0["gpu_loads_after"][0].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(layer0["gpu_loads_after"][1].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(layer0["max_over_mean_before"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(layer0["max_over_mean_after"].get<double>(), 1.0);
  // phy2log and log2phy agree.
  const auto phy2log = layer0["phy2log"].get<std::vector<int>>();
  ASSERT_EQ(phy2log.size(), 6u);
  const auto log2phy = layer0["log2phy"].get<std::vector<std::vector<int>>>();
  ASSERT_EQ(log2phy.size(), 4u);
  for (int expert = 0; expert < 4; ++expert) {
    int replicas = 0;
    for (int slot : log2phy[static_cast<size_t>(expert)]) {
      if (slot < 0) continue;
      EXPECT_EQ(phy2log[static_cast<size_t>(slot)], expert);
      ++replicas;
    }
    EXPECT_EQ(replicas, layer0["logcnt"][static_cast<size_t>(expert)].get<int>());
  }
  EXPECT_DOUBLE_EQ(plan["summary"]["worst_max_over_mean_after"].get<double>(), 1.0);

  const CommandResult to_stdout = run("--gpus 2 --slots 6 --json - --loads " + csv);
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_EQ(nlohmann::json::parse(to_stdout.out)["layers"][1]["logcnt"],
            nlohmann::json({2, 2, 1, 1}));
}

TEST_F(PlanCommand, PlansIncrementallyFromTheCurrentPlacement) {
  // Current: loads 8 4 2 2 -> expert 0 has 3 replicas, the GPUs hold {0 0 0} and {1 2 3}.
  const std::string current = (dir_ / "current.json").string();
  ASSERT_EQ(
      run("--gpus 2 --slots 6 --json " + current + " --loads " + write("a.json", "[[8, 4, 2, 2]]"))
          .exit_code,
      0);
  const auto current_phy2log =
      nlohmann::json::parse(read_text(current))["layers"][0]["phy2log"].get<std::vector<int>>();
  auto gpu_holding = [&](int expert) {
    for (size_t slot = 0; slot < current_phy2log.size(); ++slot) {
      if (current_phy2log[slot] == expert) return static_cast<int>(slot / 3);
    }
    return -1;
  };

  // Same loads: nothing moves.
  CommandResult same = run("--gpus 2 --slots 6 --current " + current + " --loads " +
                           write("a2.json", "[[8, 4, 2, 2]]"));
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_NE(same.out.find("expert copies 0 (a fresh plan: 0)"), std::string::npos) << same.out;

  // Expert 3 turns hot: on the current placement the GPU with {1 2 3} carries 2 + 4 + 8 = 14 of
  // 16 (max/mean 1.75). Experts 3 and 2 now get two replicas each (4 + 4, 2 + 2) and expert 0
  // one: the GPU with {1 2 3} keeps them (8) and the other receives 2 and 3 next to 0 (8).
  const std::string next = (dir_ / "next.json").string();
  CommandResult shifted = run("--gpus 2 --slots 6 --current " + current + " --json " + next +
                              " --loads " + write("b.json", "[[2, 2, 4, 8]]"));
  ASSERT_EQ(shifted.exit_code, 0) << shifted.err;
  EXPECT_NE(shifted.out.find("layer 0: max/mean per-GPU load 1.7500 -> 1.0000"), std::string::npos)
      << shifted.out;
  EXPECT_NE(shifted.out.find("  expert copies: 2 (a fresh plan: 2 copies, max/mean 1.0000)"),
            std::string::npos)
      << shifted.out;
  const nlohmann::json plan = nlohmann::json::parse(read_text(next));
  EXPECT_EQ(plan["before"], "current");
  EXPECT_EQ(plan["summary"]["expert_copies"], 2);
  const auto& layer = plan["layers"][0];
  EXPECT_EQ(layer["logcnt"], nlohmann::json({1, 1, 2, 2}));
  const int gpu_of_3 = gpu_holding(3), gpu_of_0 = gpu_holding(0);
  ASSERT_NE(gpu_of_3, gpu_of_0);
  EXPECT_EQ(layer["moves"], nlohmann::json({{2, gpu_of_3, gpu_of_0}, {3, gpu_of_3, gpu_of_0}}))
      << layer["moves"].dump();
  // Renumbered to the current GPUs: the GPU that keeps 1, 2, 3 keeps them in their slots.
  const auto phy2log = layer["phy2log"].get<std::vector<int>>();
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(phy2log[static_cast<size_t>(gpu_of_3 * 3 + k)],
              current_phy2log[static_cast<size_t>(gpu_of_3 * 3 + k)]);
  }

  CommandResult mismatch = run("--gpus 2 --slots 6 --current " + current + " --loads " +
                               write("c.json", "[[1, 1, 1, 1], [1, 1, 1, 1]]"));
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_NE(mismatch.err.find(current + ": the current placement has 1 layers x 4 experts on 2 "
                                        "GPUs; the loads have 2 x 4"),
            std::string::npos)
      << mismatch.err;
  CommandResult not_a_plan = run("--gpus 2 --slots 6 --current " + write("x.json", "[1, 2]") +
                                 " --loads " + write("a3.json", "[[8, 4, 2, 2]]"));
  EXPECT_EQ(not_a_plan.exit_code, 1);
  EXPECT_NE(not_a_plan.err.find("not a placement written by `moescope plan --json`"),
            std::string::npos)
      << not_a_plan.err;
}

// Records expert loads with the recorder's C API, as MoELayer does, one file per rank.
void record_expert_loads(const std::string& path, int rank, uint32_t scope,
                         const std::vector<std::vector<std::vector<int64_t>>>& steps_layers) {
  const std::string metadata = "{\"rank\": " + std::to_string(rank) + "}";
  ASSERT_EQ(moescope_recorder_start(path.c_str(), metadata.c_str()), 0) << path;
  for (size_t step = 0; step < steps_layers.size(); ++step) {
    moescope_step(static_cast<int64_t>(step));
    for (size_t layer = 0; layer < steps_layers[step].size(); ++layer) {
      const auto& tokens = steps_layers[step][layer];
      moescope_expert_load(static_cast<int64_t>(step), static_cast<uint32_t>(layer), rank, scope,
                           tokens.data(), static_cast<uint32_t>(tokens.size()), 0);
    }
  }
  moescope_recorder_stop();
}

TEST_F(PlanCommand, ReadsMeanLoadsFromTraces) {
  // Two ranks record LOCAL loads; per step the planner sees their sum, averaged over the steps:
  // layer 0 steps {3 1 1 1}+{3 1 1 1} and {5 3 1 1}+{5 3 1 1} -> mean 8 4 2 2 (the hand-checked
  // case: 12 and 4 per GPU before, 8 and 8 after); layer 1 is uniform.
  const std::string rank0 = (dir_ / "run.0.moetrace").string();
  const std::string rank1 = (dir_ / "run.1.moetrace").string();
  const std::vector<std::vector<std::vector<int64_t>>> per_rank = {{{3, 1, 1, 1}, {1, 1, 1, 1}},
                                                                   {{5, 3, 1, 1}, {1, 1, 1, 1}}};
  record_expert_loads(rank0, 0, MOESCOPE_EXPERTS_LOCAL, per_rank);
  record_expert_loads(rank1, 1, MOESCOPE_EXPERTS_LOCAL, per_rank);

  const CommandResult result = run("--gpus 2 --slots 6 --json - " + rank0 + " " + rank1);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json plan = nlohmann::json::parse(result.out);
  ASSERT_EQ(plan["num_layers"], 2);
  EXPECT_EQ(plan["layers"][0]["gpu_loads_before"], nlohmann::json({12.0, 4.0}));
  EXPECT_EQ(plan["layers"][0]["logcnt"], nlohmann::json({3, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(plan["layers"][0]["max_over_mean_after"].get<double>(), 1.0);
  EXPECT_EQ(plan["layers"][1]["gpu_loads_before"], nlohmann::json({4.0, 4.0}));

  // A trace without expert loads says so.
  const std::string empty = (dir_ / "empty.moetrace").string();
  record_expert_loads(empty, 0, MOESCOPE_EXPERTS_GLOBAL, {});
  const CommandResult none = run("--gpus 2 --slots 4 " + empty);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("no expert-load samples in the given trace(s)"), std::string::npos)
      << none.err;
}

TEST_F(PlanCommand, PlansForTheNextWindowFromTheRecordedSteps) {
  // 8 steps whose hot expert drifts from 0 to 3: windows of 2 steps give the forecast after the
  // last step and its errors on windows 2, 3 and 4: 4 scenarios.
  const std::string rank0 = (dir_ / "drift.0.moetrace").string();
  std::vector<std::vector<std::vector<int64_t>>> steps;
  for (int64_t step = 0; step < 8; ++step) {
    steps.push_back({{8 - step, 2, 2, 1 + step}, {3, 3, 3, 3}});
  }
  record_expert_loads(rank0, 0, MOESCOPE_EXPERTS_GLOBAL, steps);
  const CommandResult text = run("--gpus 2 --slots 6 --window 2 --next-window " + rank0);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("planned for the next 2 steps: expected balance over 4 load scenarios "
                          "(the forecast after 8 recorded steps"),
            std::string::npos)
      << text.out;
  // --json - stays JSON; the loads shown are the forecast: the rebalancer's EMA (alpha 0.1,
  // starting at the first step) of expert 3's 1, 2, ..., 8, not its recorded mean 4.5.
  const CommandResult json = run("--gpus 2 --slots 6 --window 2 --next-window --json - " + rank0);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json plan = nlohmann::json::parse(json.out);
  ASSERT_EQ(plan["num_layers"], 2);
  double ema = 1;
  for (int step = 1; step < 8; ++step) ema += 0.1 * ((1 + step) - ema);
  // GPU 1 holds experts 2 and 3.
  EXPECT_NEAR(plan["layers"][0]["gpu_loads_before"][1].get<double>(), 2 + ema, 1e-9) << json.out;

  const std::string loads = write("next_loads.json", kLoadsJson);
  const CommandResult refused = run("--gpus 2 --slots 6 --next-window --loads " + loads);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("--next-window plans from TRACE files"), std::string::npos)
      << refused.err;
}

TEST_F(PlanCommand, ReportsBadInputClearly) {
  const std::string loads = write("loads.json", kLoadsJson);
  CommandResult result = run("--gpus 2 --slots 5 --loads " + loads);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("moescope plan: error: expert placement: num_physical_experts (slots) "
                            "= 5 must be a multiple of num_gpus = 2"),
            std::string::npos)
      << result.err;

  result = run("--gpus 2 --slots 2 --loads " + loads);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("less than the number of logical experts (4)"), std::string::npos)
      << result.err;

  const std::string missing = (dir_ / "missing.csv").string();
  result = run("--gpus 2 --slots 4 --loads " + missing);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find(missing + ": cannot open the loads file"), std::string::npos)
      << result.err;

  result = run("--gpus 2 --slots 4 --loads " + write("bad.csv", "1,2,x,4\n"));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("line 1 column 3: 'x' is not a number"), std::string::npos)
      << result.err;

  const std::string missing_trace = (dir_ / "run.0.moetrace").string();
  result = run("--gpus 2 --slots 4 " + missing_trace);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find(missing_trace + ":0: cannot open"), std::string::npos) << result.err;

  result = run("--gpus 2 --slots 4");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("either with --loads FILE or as TRACE files"), std::string::npos)
      << result.err;

  result = run("--gpus 2 --slots 4 --policy fastest --loads " + loads);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("--policy"), std::string::npos) << result.err;

  result = run("--gpus 4 --slots 8 --nodes 2 --groups 3 --policy hierarchical --loads " + loads);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("must be a multiple of num_groups = 3"), std::string::npos)
      << result.err;

  result = run("--slots 4 --loads " + loads);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("--gpus"), std::string::npos) << result.err;
}

}  // namespace
