// `moescope diff` and `moescope plan`'s prediction as a user runs them: plan from a skewed run,
// compare it with a balanced run given the plan, and the errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_test_support.h"
#include "diff_run_writer.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

using testing::CommandResult;
using testing::joined;
using testing::run_cli;

TEST(CliDiff, PlanPredictsAndDiffComparesWithTheBalancedRun) {
  const std::string directory = testing::test_directory("cli_diff");
  testing::DiffRunOptions skewed;
  skewed.hot_layer = 1;
  skewed.hot_factor = 4.0;    // expert 0, on rank 0
  skewed.allreduce_ms = 0.3;  // all-reduces of two sizes: 0.3 ms + 2 ms per MiB
  skewed.allreduce_ms_per_mib = 2.0;
  skewed.allreduce_bytes = 1ull << 20;
  const auto before = testing::write_diff_run(directory, "skewed", skewed);
  // The run with the plan: balanced rows, and each of the 2 layers with replicas syncs their
  // gradients in 2 more all-reduces of their own (a loop that does not pack them into its
  // gradient all-reduce: --replica-sync-collectives 2; no --expert-bytes: their bytes are not
  // counted, 0 here).
  testing::DiffRunOptions balanced = skewed;
  balanced.seed = 2;
  balanced.balanced_rows = true;
  balanced.replica_sync_ops = 4;
  const auto after = testing::write_diff_run(directory, "balanced", balanced);

  const std::string plan_path = directory + "/plan.json";
  CommandResult plan =
      run_cli("plan --gpus 2 --slots 10 --static --advise --replica-sync-collectives 2 --json " +
              plan_path + joined(before));
  ASSERT_EQ(plan.exit_code, 0) << plan.out;
  for (const char* expected : {"prediction (cost model from the trace: busy = ",
                               "    expert compute ", "    replica grad sync ", "(4 all-reduce(s)",
                               "at 95%", "advice: rebalance: gain ", "no --expert-bytes"}) {
    EXPECT_NE(plan.out.find(expected), std::string::npos) << expected << "\n" << plan.out;
  }
  std::ifstream plan_file(plan_path);
  const nlohmann::json plan_json = nlohmann::json::parse(plan_file);
  const auto& prediction = plan_json.at("prediction");
  EXPECT_NEAR(prediction["cost_model"]["ms_per_row"].get<double>(), skewed.ms_per_row,
              0.1 * skewed.ms_per_row);
  // Rank 0's extra rows go (-1.6 ms); the replicas' all-reduces take back 1.2 ms.
  EXPECT_LT(prediction["step_ms_change"].get<double>(), -0.2);
  ASSERT_EQ(prediction["ranks"].size(), 2u);
  ASSERT_EQ(prediction["terms"].size(), 4u);  // compute, all-to-all, replica sync, migration
  EXPECT_EQ(prediction["terms"][2]["name"], "replica grad sync");
  EXPECT_NEAR(prediction["terms"][2]["ms"].get<double>(), 4 * 0.3, 0.05);
  EXPECT_LT(prediction["step_ms_change_low"].get<double>(),
            prediction["step_ms_change"].get<double>());
  EXPECT_TRUE(plan_json.at("advice")["rebalance"].get<bool>());

  CommandResult text =
      run_cli("diff" + joined(before) + " --against" + joined(after) + " --predicted " + plan_path);
  ASSERT_EQ(text.exit_code, 0) << text.out;
  for (const char* expected :
       {"moescope diff", "Ranked changes", "layer 1 ranks max/mean", "lower",
        "Predicted by the plan vs measured in the new run", "step time change: predicted"}) {
    EXPECT_NE(text.out.find(expected), std::string::npos) << expected << "\n" << text.out;
  }
  const std::string json_path = directory + "/diff.json";
  CommandResult json = run_cli("diff --format json -o " + json_path + joined(before) +
                               " --against" + joined(after) + " --predicted " + plan_path);
  ASSERT_EQ(json.exit_code, 0) << json.out;
  std::ifstream diff_file(json_path);
  const nlohmann::json diff = nlohmann::json::parse(diff_file);
  EXPECT_GT(diff["significant"].get<int>(), 0);
  bool step_faster = false;
  for (const auto& row : diff["rows"]) {
    if (row["name"] == "step time") step_faster = row["verdict"] == "faster";
  }
  EXPECT_TRUE(step_faster);
  // Each rank computes what the plan said (its rows per step summed over layers), within 3%.
  const auto& check = diff.at("prediction");
  for (size_t rank = 0; rank < 2; ++rank) {
    double predicted = 0, measured = 0;
    for (double rows : check["predicted"]["ranks"][rank]["rows_after"]) predicted += rows;
    for (double rows : check["measured_ranks"][rank]["rows"]) measured += rows;
    EXPECT_NEAR(measured, predicted, 0.03 * predicted) << "rank " << rank;
  }
  const double predicted_change = check["predicted"]["step_ms_change"];
  const double measured_change = check["measured_step_ms_change"];
  EXPECT_NEAR(measured_change, predicted_change, 0.25 * std::abs(predicted_change));
  EXPECT_TRUE(check["inside_interval"].get<bool>());
  EXPECT_NE(text.out.find("not between runs of the same program"), std::string::npos) << text.out;

  // --run-to-run: the step time's interval and the check's hold the given run-to-run SD too.
  const std::string wide_path = directory + "/diff_run_to_run.json";
  CommandResult wide_run =
      run_cli("diff --format json --run-to-run 3 -o " + wide_path + joined(before) + " --against" +
              joined(after) + " --predicted " + plan_path);
  ASSERT_EQ(wide_run.exit_code, 0) << wide_run.out;
  std::ifstream wide_file(wide_path);
  const nlohmann::json wide = nlohmann::json::parse(wide_file);
  EXPECT_EQ(wide["method"]["run_to_run_ms"].get<double>(), 3.0);
  const auto& wide_check = wide.at("prediction");
  EXPECT_DOUBLE_EQ(wide_check["measured_step_ms_change"].get<double>(), measured_change);
  // 1.96 x sqrt(2 x 9 + the runs' own variance) on each side of the change.
  const double half_width =
      0.5 * (wide_check["measured_high"].get<double>() - wide_check["measured_low"].get<double>());
  EXPECT_GT(half_width, 1.959 * std::sqrt(18.0));
  EXPECT_GT(half_width,
            0.5 * (check["measured_high"].get<double>() - check["measured_low"].get<double>()));
  CommandResult wide_text =
      run_cli("diff --run-to-run 3" + joined(before) + " --against" + joined(after));
  EXPECT_NE(wide_text.out.find("its interval includes a run-to-run standard deviation of 3.00 ms"),
            std::string::npos)
      << wide_text.out;
}

// --rebalance-every: the prediction is for the runtime rebalancer replayed on the recorded
// loads; the skew is there from the first step, so its first decision (after step 10) moves
// the hot expert and every kept step after it has the planned busiest GPU.
TEST(CliDiff, PlanReplaysTheRuntimeRebalancerOnTheRecordedLoads) {
  const std::string directory = testing::test_directory("cli_diff_replay");
  testing::DiffRunOptions skewed;
  skewed.hot_layer = 1;
  skewed.hot_factor = 4.0;
  const auto before = testing::write_diff_run(directory, "skewed", skewed);
  const std::string once_path = directory + "/once.json", replay_path = directory + "/replay.json";
  CommandResult once = run_cli(
      "plan --gpus 2 --slots 10 --skip-steps 10 --window 10 "
      "--expert-bytes 1000 --json " +
      once_path + joined(before));
  ASSERT_EQ(once.exit_code, 0) << once.out;
  CommandResult replay = run_cli(
      "plan --gpus 2 --slots 10 --skip-steps 10 --window 10 "
      "--expert-bytes 1000 --rebalance-every 10 --json " +
      replay_path + joined(before));
  ASSERT_EQ(replay.exit_code, 0) << replay.out;
  EXPECT_NE(replay.out.find(
                "replayed the runtime rebalancer (net rule) every 10 steps on 20 recorded steps"),
            std::string::npos)
      << replay.out;
  auto expert_compute = [](const std::string& path) {
    std::ifstream file(path);
    const nlohmann::json plan = nlohmann::json::parse(file);
    for (const auto& term : plan.at("prediction").at("terms")) {
      if (term["name"] == "expert compute") return term["ms"].get<double>();
    }
    return 0.0;
  };
  // Both take the hot expert's rows off rank 0. The skew is there from the first step, so the
  // rebalancer's first decision plans for the same loads as the plan with hindsight, and every
  // kept step runs under it: the two save about the same (the loads' jitter apart).
  const double saved_once = -expert_compute(once_path), saved_replay = -expert_compute(replay_path);
  EXPECT_GT(saved_once, 0);
  EXPECT_NEAR(saved_replay, saved_once, 0.1 * saved_once);

  // The imbalance rule (moe_train --rebalance-rule imbalance, the demo's) weighs the recorded
  // step times against the bytes at an assumed bandwidth: at the runtime's default it makes
  // the same move; at 1 byte/s no move is worth it.
  const std::string imbalance_path = directory + "/imbalance.json";
  CommandResult imbalance = run_cli(
      "plan --gpus 2 --slots 10 --skip-steps 10 --window 10 --expert-bytes 1000 "
      "--rebalance-every 10 --rebalance-rule imbalance --json " +
      imbalance_path + joined(before));
  ASSERT_EQ(imbalance.exit_code, 0) << imbalance.out;
  EXPECT_NE(imbalance.out.find("(imbalance rule)"), std::string::npos) << imbalance.out;
  EXPECT_NEAR(-expert_compute(imbalance_path), saved_once, 0.1 * saved_once);
  CommandResult slow = run_cli(
      "plan --gpus 2 --slots 10 --skip-steps 10 --window 10 --expert-bytes 1000 "
      "--rebalance-every 10 --rebalance-rule imbalance --transfer-bandwidth 1" +
      joined(before));
  ASSERT_EQ(slow.exit_code, 0) << slow.out;
  EXPECT_NE(slow.out.find(": 0 of "), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find(" 0 expert copies"), std::string::npos) << slow.out;

  const std::string loads = directory + "/loads.json";
  std::ofstream(loads) << "[[1, 2, 3, 4]]";
  CommandResult no_traces =
      run_cli("plan --gpus 2 --slots 6 --rebalance-every 10 --loads " + loads);
  EXPECT_NE(no_traces.exit_code, 0);
  EXPECT_NE(no_traces.out.find("--rebalance-every needs TRACE files"), std::string::npos)
      << no_traces.out;
}

// `moescope noise`: three recordings of one program (each a folder of its ranks' traces), whose
// forward takes 0, 1.5 and 3 ms longer: each recording's step time is the diff's row, and the
// run-to-run SD is the spread of their means less their own noise.
TEST(CliDiff, NoiseMeasuresTheRunToRunSpreadOfOneProgram) {
  const std::string directory = testing::test_directory("cli_noise");
  std::vector<std::string> folders;
  for (int run = 0; run < 3; ++run) {
    testing::DiffRunOptions options;
    options.seed = 40 + run;
    options.forward_extra_ms = 1.5 * run;
    folders.push_back(directory + "/run" + std::to_string(run));
    std::filesystem::create_directories(folders.back());
    testing::write_diff_run(folders.back(), "run", options);
  }
  const std::string json_path = directory + "/noise.json";
  CommandResult noise = run_cli("noise" + joined(folders) + " --json " + json_path);
  ASSERT_EQ(noise.exit_code, 0) << noise.out;
  for (const char* expected : {"3 recording(s) of 1 program(s)", "run-to-run standard deviation",
                               "--run-to-run", "2 degree(s) of freedom make a rough figure"}) {
    EXPECT_NE(noise.out.find(expected), std::string::npos) << expected << "\n" << noise.out;
  }
  std::ifstream json_file(json_path);
  const nlohmann::json result = nlohmann::json::parse(json_file);
  ASSERT_EQ(result["recordings"].size(), 3u);
  EXPECT_EQ(result["degrees_of_freedom"].get<int>(), 2);
  // The means 0, 1.5 and 3 ms apart (+ noise): sd about 1.5 ms, most of it run to run.
  EXPECT_NEAR(result["between_sd_ms"].get<double>(), 1.5, 0.4);
  const double between = result["between_sd_ms"], within = result["within_se_ms"];
  EXPECT_NEAR(result["run_to_run_ms"].get<double>(), std::sqrt(between * between - within * within),
              1e-9);
  // Each recording's step time is what `diff` shows for it.
  const std::string diff_path = directory + "/diff.json";
  ASSERT_EQ(run_cli("diff --format json -o " + diff_path + " " + folders[0] + "/run.0.moetrace " +
                    folders[0] + "/run.1.moetrace --against " + folders[1] + "/run.0.moetrace " +
                    folders[1] + "/run.1.moetrace")
                .exit_code,
            0);
  std::ifstream diff_file(diff_path);
  const nlohmann::json diff = nlohmann::json::parse(diff_file);
  bool compared = false;
  for (const auto& row : diff["rows"]) {
    if (row["name"] != "step time") continue;
    EXPECT_DOUBLE_EQ(row["base"]["mean"].get<double>(),
                     result["recordings"][0]["step_ms"].get<double>());
    EXPECT_DOUBLE_EQ(row["new"]["standard_error"].get<double>(),
                     result["recordings"][1]["standard_error_ms"].get<double>());
    compared = true;
  }
  EXPECT_TRUE(compared) << "no step time row in the diff";

  // One recording says nothing about run to run; an empty folder is named.
  CommandResult alone = run_cli("noise " + folders[0]);
  EXPECT_EQ(alone.exit_code, 1) << alone.out;
  EXPECT_NE(alone.out.find("no program has two recordings"), std::string::npos) << alone.out;
  const std::string empty = directory + "/empty";
  std::filesystem::create_directories(empty);
  CommandResult nothing = run_cli("noise " + folders[0] + " " + empty);
  EXPECT_EQ(nothing.exit_code, 1) << nothing.out;
  EXPECT_NE(nothing.out.find(empty + ": no .moetrace file"), std::string::npos) << nothing.out;
}

// A run's folder (what `moescope record -o FOLDER/run.%r.moetrace` writes) stands for its
// .moetrace files in every command that reads a recorded run; an empty folder is named.
// Every command that reads a recorded run, on `run` (`diff` against `base`; `export` writes
// into `directory`).
std::vector<std::string> commands_reading(const std::string& run, const std::string& base,
                                          const std::string& directory) {
  return {"report " + run, "diff " + base + " --against " + run, "plan --gpus 2 --slots 8 " + run,
          "metrics --jsonl - " + run, "export --chrome " + directory + "/out.json " + run};
}

TEST(CliDiff, ARunsFolderStandsForItsTraces) {
  const std::string directory = testing::test_directory("cli_run_folder");
  const std::string base = directory + "/base", next = directory + "/next";
  std::filesystem::create_directories(base);
  std::filesystem::create_directories(next);
  testing::DiffRunOptions options;
  const auto base_files = testing::write_diff_run(base, "run", options);
  options.seed = 2;
  options.forward_extra_ms = 2.0;
  const auto next_files = testing::write_diff_run(next, "run", options);
  auto same_output = [&](const std::string& by_files, const std::string& by_folder) {
    const CommandResult files = run_cli(by_files), folder = run_cli(by_folder);
    EXPECT_EQ(files.exit_code, 0) << by_files << "\n" << files.out;
    EXPECT_EQ(folder.exit_code, 0) << by_folder << "\n" << folder.out;
    EXPECT_EQ(folder.out, files.out) << by_folder;
    EXPECT_GT(files.out.size(), 100u) << by_files;
  };
  same_output("report -q --format json" + joined(base_files), "report -q --format json " + base);
  same_output("diff --format json" + joined(base_files) + " --against" + joined(next_files),
              "diff --format json " + base + " --against " + next);
  same_output("plan --gpus 2 --slots 8" + joined(base_files), "plan --gpus 2 --slots 8 " + base);
  same_output("metrics --jsonl -" + joined(base_files), "metrics --jsonl - " + base);

  const std::string empty = directory + "/empty";
  std::filesystem::create_directories(empty);
  for (const std::string& command : commands_reading(empty, base, directory)) {
    const CommandResult result = run_cli(command);
    EXPECT_EQ(result.exit_code, 1) << command << "\n" << result.out;
    EXPECT_NE(result.out.find(empty + ": no .moetrace file in this folder"), std::string::npos)
        << command << "\n"
        << result.out;
  }
}

// The folder torch.profiler's tensorboard_trace_handler writes (by torch itself here, on CPU)
// stands for its traces as a moescope run's folder does; a moescope run's folder without a trace
// is not read for its own JSON files.
TEST(CliDiff, APyTorchProfilerFolderStandsForItsTraces) {
  const std::string directory = testing::test_directory("cli_profiler_folder");
  const std::string folder = directory + "/log";
  // Two ranks of one Gloo job, running together as ranks do.
  const std::string command =
      "python3 " + testing::helper_script("write_kineto_trace.py") + " --handler " + folder;
  const std::string job = " 1 --world 2 --store " + directory + "/store --rank ";
  const std::string both = command + " worker_a" + job + "0 & a=$!; " + command + " worker_b" +
                           job + "1 & b=$!; wait $a && wait $b";
  ASSERT_EQ(std::system(both.c_str()), 0) << both;
  std::vector<std::string> traces;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    traces.push_back(entry.path().string());
  }
  std::sort(traces.begin(), traces.end());
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_NE(traces[0].find("worker_a."), std::string::npos) << traces[0];
  EXPECT_TRUE(traces[0].ends_with(".pt.trace.json.gz")) << traces[0];

  const CommandResult by_files = run_cli("report -q --format json" + joined(traces));
  const CommandResult by_folder = run_cli("report -q --format json " + folder);
  ASSERT_EQ(by_folder.exit_code, 0) << by_folder.out;
  EXPECT_EQ(by_folder.out, by_files.out);
  const nlohmann::json report = nlohmann::json::parse(by_folder.out);
  EXPECT_EQ(report["summary"]["ranks"], 2) << report["summary"].dump();
  const CommandResult diff = run_cli("diff " + folder + " --against " + folder);
  EXPECT_EQ(diff.exit_code, 0) << diff.out;

  const std::string run = directory + "/run";
  std::filesystem::create_directories(run);
  std::ofstream(run + "/run.json") << "{\"command\": [\"python3\"]}\n";
  const CommandResult no_trace = run_cli("report " + run);
  EXPECT_EQ(no_trace.exit_code, 1) << no_trace.out;
  EXPECT_NE(no_trace.out.find(run + ": no .moetrace file in this folder"), std::string::npos)
      << no_trace.out;
}

// Files that are not separate ranks are refused by every command that reads a run, naming
// both: one recording under two names (also through its summaries), and torch.profiler's two
// cycles of one process (written by torch here). Two real ranks still load.
TEST(CliDiff, OneProcessIsNeverTwoRanks) {
  const std::string directory = testing::test_directory("cli_one_process");
  const std::string data = testing::helper_script("../data/moe_train_2ranks");
  const std::string twice = directory + "/twice";
  std::filesystem::create_directories(twice);
  std::filesystem::copy_file(data + "/run.0.moetrace", twice + "/a.moetrace");
  std::filesystem::copy_file(data + "/run.0.moetrace", twice + "/b.moetrace");
  const std::string profiler = directory + "/profiler";
  const std::string command = "python3 " + testing::helper_script("write_kineto_trace.py") +
                              " --handler " + profiler + " worker 2";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ASSERT_EQ(std::distance(std::filesystem::directory_iterator(profiler), {}), 2);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {twice, "refused: the same recording as " + twice + "/a.moetrace (pid "},
      {profiler, "at another time (two torch.profiler cycles?)"}};
  for (const auto& [folder, said] : cases) {
    for (const std::string& run : commands_reading(folder, data, directory)) {
      const CommandResult result = run_cli(run);
      EXPECT_EQ(result.exit_code, 1) << run << "\n" << result.out;
      EXPECT_NE(result.out.find(said), std::string::npos) << run << "\n" << result.out;
      EXPECT_NE(result.out.find("was refused (above)"), std::string::npos) << run;
    }
  }
  ASSERT_EQ(run_cli("summarize " + twice + "/a.moetrace " + twice + "/b.moetrace").exit_code, 0);
  const CommandResult summaries = run_cli("report " + twice);
  EXPECT_EQ(summaries.exit_code, 1) << summaries.out;
  EXPECT_NE(summaries.out.find("are one recording: read from the traces"), std::string::npos)
      << summaries.out;
  EXPECT_NE(summaries.out.find("refused: the same recording as"), std::string::npos);

  const CommandResult two_ranks = run_cli("report -q --format json " + data);
  ASSERT_EQ(two_ranks.exit_code, 0) << two_ranks.out;
  EXPECT_EQ(nlohmann::json::parse(two_ranks.out)["summary"]["ranks"], 2);
}

// A full disk: every command that writes a file says which one it could not write, and exits 1.
TEST(CliDiff, AFullDiskIsAnErrorNamingTheFile) {
  const std::string directory = testing::test_directory("cli_full_disk");
  const auto run = testing::write_diff_run(directory, "run", testing::DiffRunOptions{});
  for (const std::string& command : {"report -q -o /dev/full" + joined(run),
                                     "diff -o /dev/full" + joined(run) + " --against" + joined(run),
                                     "noise --json /dev/full " + run[0] + " " + run[1],
                                     "plan --gpus 2 --slots 8 --json /dev/full" + joined(run),
                                     "metrics --jsonl /dev/full" + joined(run)}) {
    const CommandResult result = run_cli(command);
    EXPECT_EQ(result.exit_code, 1) << command << "\n" << result.out;
    EXPECT_NE(result.out.find("error: cannot write /dev/full"), std::string::npos)
        << command << "\n"
        << result.out;
  }
}

TEST(CliDiff, BadInputGivesClearErrors) {
  const std::string directory = testing::test_directory("cli_diff_errors");
  const auto run_paths = testing::write_diff_run(directory, "run", testing::DiffRunOptions{});
  CommandResult missing = run_cli("diff" + joined(run_paths));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.out.find("--against"), std::string::npos) << missing.out;

  CommandResult unreadable =
      run_cli("diff" + joined(run_paths) + " --against " + directory + "/none");
  EXPECT_EQ(unreadable.exit_code, 1) << unreadable.out;
  EXPECT_NE(unreadable.out.find("nothing readable in the new run"), std::string::npos)
      << unreadable.out;

  // A plan made from a loads file has no prediction to check.
  const std::string loads = directory + "/loads.json";
  std::ofstream(loads) << "[[4, 1, 1, 2]]";
  const std::string plan = directory + "/plan.json";
  ASSERT_EQ(run_cli("plan --gpus 2 --slots 4 --json " + plan + " --loads " + loads).exit_code, 0);
  // --advise needs traces to fit its costs from; bad cost options are refused by name.
  CommandResult advise_loads = run_cli("plan --gpus 2 --slots 4 --advise --loads " + loads);
  EXPECT_EQ(advise_loads.exit_code, 0) << advise_loads.out;
  EXPECT_NE(advise_loads.out.find("no prediction: --advise needs TRACE files"), std::string::npos)
      << advise_loads.out;
  CommandResult negative =
      run_cli("plan --gpus 2 --slots 10 --expert-bytes -5" + joined(run_paths));
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.out.find("--expert-bytes"), std::string::npos) << negative.out;
  CommandResult window = run_cli("plan --gpus 2 --slots 10 --window 0" + joined(run_paths));
  EXPECT_NE(window.exit_code, 0);
  EXPECT_NE(window.out.find("--window"), std::string::npos) << window.out;
  CommandResult collectives =
      run_cli("plan --gpus 2 --slots 10 --replica-sync-collectives -1" + joined(run_paths));
  EXPECT_NE(collectives.exit_code, 0);
  EXPECT_NE(collectives.out.find("--replica-sync-collectives"), std::string::npos)
      << collectives.out;
  CommandResult no_prediction = run_cli("diff" + joined(run_paths) + " --against" +
                                        joined(run_paths) + " --predicted " + plan);
  EXPECT_EQ(no_prediction.exit_code, 1);
  EXPECT_NE(no_prediction.out.find("no \"prediction\" in this plan"), std::string::npos)
      << no_prediction.out;

  CommandResult run_to_run =
      run_cli("diff --run-to-run -1" + joined(run_paths) + " --against" + joined(run_paths));
  EXPECT_NE(run_to_run.exit_code, 0);
  EXPECT_NE(run_to_run.out.find("--run-to-run"), std::string::npos) << run_to_run.out;

  CommandResult format =
      run_cli("diff --format yaml" + joined(run_paths) + " --against" + joined(run_paths));
  EXPECT_NE(format.exit_code, 0);
  EXPECT_NE(format.out.find("must be text, markdown or json"), std::string::npos) << format.out;
}

}  // namespace
}  // namespace moescope::analysis
