// moe_train as a user runs it: one and two ranks learn the shipped text, a checkpoint resumes
// to the very same losses, bad options are refused with a message naming them.
#include <glob.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/trace_model.h"
#include "sample_runs.h"

namespace moescope::samples_test {
namespace {

std::string moe_train() {
  return build_dir() + "/bin/moe_train";
}

// Small and fast settings; one intra-op thread so runs are deterministic and ranks do not
// fight over the two cores of a CI machine.
const std::string kSmallModel =
    " --threads 1 --layers 2 --hidden 32 --heads 4 --ffn-hidden 64 --experts 4 --top-k 2"
    " --batch 8 --seq-len 32 --lr 1e-2 --warmup-steps 5";

// Launches `ranks` processes of moe_train with the environment a launcher sets; returns rank
// 0's output followed by the others' (each also in DIR/rankN.log).
CommandResult run_ranks(int ranks, const std::string& args, const std::string& dir) {
  const int port = free_port_pair();
  std::string command;
  for (int rank = 0; rank < ranks; ++rank) {
    command += "(RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
               " WORLD_SIZE=" + std::to_string(ranks) +
               " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " timeout 240 " +
               shell_quote(moe_train()) + " " + args + " > " + dir + "/rank" +
               std::to_string(rank) + ".log 2>&1; echo $? > " + dir + "/rank" +
               std::to_string(rank) + ".rc) & ";
  }
  command += "wait; rc=0; for f in " + dir + "/rank*.rc; do [ \"$(cat $f)\" = 0 ] || rc=1; done; ";
  command += "cat " + dir + "/rank*.log; exit $rc";
  return run_shell(command);
}

TEST(MoeTrainTest, OneRankLossFallsOnTheShippedText) {
  CommandResult run = run_shell(moe_train() + kSmallModel + " --steps 30");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto losses = parse_losses(run.output);
  ASSERT_EQ(losses.size(), 30u) << run.output;
  // Byte-level start: ln(256) = 5.55. Learning the byte statistics of English takes it well
  // below 4 within 30 steps; a broken backward or optimizer leaves it near 5.5.
  EXPECT_NEAR(losses.begin()->second, 5.55, 0.3) << run.output;
  EXPECT_LT(mean_of_last(losses, 5), mean_of_first(losses, 5) - 1.2) << run.output;
}

TEST(MoeTrainTest, TwoRanksShareTheExpertsAndLearn) {
  const std::string dir = fresh_dir("two_ranks");
  CommandResult run = run_ranks(2, kSmallModel + " --steps 30 --print-expert-load", dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("2 rank(s) (gloo)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(2 per rank)"), std::string::npos) << run.output;
  auto losses = parse_losses(run.output);
  ASSERT_EQ(losses.size(), 30u) << run.output;
  EXPECT_LT(mean_of_last(losses, 5), mean_of_first(losses, 5) - 1.2) << run.output;
  // Both ranks routed their own tokens every step: batch 8 x 32 tokens x top-2 each.
  auto loads = parse_expert_load_lines(run.output);
  ASSERT_EQ(loads.size(), 2u * 30u * 2u) << run.output;
  for (const auto& [key, counts] : loads) {
    int64_t total = 0;
    for (int64_t count : counts) total += count;
    EXPECT_EQ(total, 8 * 32 * 2);
    EXPECT_EQ(counts.size(), 4u);
  }
}

// A rank whose experts get no token of a layer from the first step (layer 1's router skewed
// onto rank 0's experts) takes its all-to-all buffers from a pool that nothing reserved yet
// (--dispatch-pool without a rebalancer): it trains like the others.
TEST(MoeTrainTest, TwoRanksWithADispatchPoolAndARankWithoutTokensLearn) {
  const std::string dir = fresh_dir("dispatch_pool_idle_rank");
  CommandResult run =
      run_ranks(2, kSmallModel + " --steps 20 --gate-skew 8 --skew-layer 1 --dispatch-pool", dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto losses = parse_losses(run.output);
  ASSERT_EQ(losses.size(), 20u) << run.output;
  EXPECT_LT(mean_of_last(losses, 5), mean_of_first(losses, 5) - 0.5) << run.output;
}

TEST(MoeTrainTest, TwoRanksRebalanceASkewedLayerAndStillLearn) {
  const std::string dir = fresh_dir("rebalance");
  // Layer 1's router prefers experts 0 and 1 (rank 0's): the rebalancer moves and replicates
  // experts so both ranks get work, over the process group, while training goes on. The
  // imbalance rule applies plans from the loads alone; the cost rule (the default) needs more
  // steps of timings than 24 before its interval clears 0 on a loaded CPU (docs/balancer.md).
  CommandResult run = run_ranks(2,
                                kSmallModel +
                                    " --steps 24 --gate-skew 4 --skew-layer 1 --redundant-experts 2"
                                    " --rebalance-every 8 --dispatch-pool --receive-cap 100000"
                                    " --rebalance-rule imbalance",
                                dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("(3 per rank)"), std::string::npos) << run.output;
  const std::regex decision(
      R"(rebalance step (\d+) layer (\d+) predicted max/mean (\S+) -> (\S+) (applied|kept))");
  int decisions = 0, applied = 0;
  for (std::sregex_iterator it(run.output.begin(), run.output.end(), decision), end; it != end;
       ++it) {
    ++decisions;
    EXPECT_LE(std::stod((*it)[4]), std::stod((*it)[3])) << "a plan made the balance worse";
    if ((*it)[5] == "applied") ++applied;
  }
  EXPECT_EQ(decisions, 2 * 3) << run.output;  // steps 7, 15, 23 x 2 layers
  EXPECT_GE(applied, 1) << run.output;
  auto losses = parse_losses(run.output);
  ASSERT_EQ(losses.size(), 24u) << run.output;
  EXPECT_LT(mean_of_last(losses, 5), mean_of_first(losses, 5) - 1.0) << run.output;
}

// "rebalance step S layer L predicted max/mean A -> B applied|kept" lines: step -> the line up
// to the decision (the bytes and milliseconds after it are not compared).
std::multimap<int64_t, std::string> parse_rebalance_decisions(const std::string& output) {
  const std::regex decision(
      R"(rebalance step (\d+) layer \d+ predicted max/mean \S+ -> \S+ (applied|kept))");
  std::multimap<int64_t, std::string> decisions;
  for (std::sregex_iterator it(output.begin(), output.end(), decision), end; it != end; ++it) {
    decisions.emplace(std::stoll((*it)[1]), (*it)[0]);
  }
  return decisions;
}

// Runs `args` for `steps` steps straight, then for steps/2 with a checkpoint and resumed from
// it up to `steps` (on `ranks` ranks, in `dir`); expects the very same loss at every step and
// returns the straight run's output and the two halves' outputs.
struct ResumedRuns {
  std::string straight, first_half, second_half;
};

ResumedRuns expect_resume_gives_identical_losses(int ranks, const std::string& args, int steps,
                                                 const std::string& dir) {
  const auto run = [&](const std::string& more) {
    return ranks == 1 ? run_shell(moe_train() + args + more) : run_ranks(ranks, args + more, dir);
  };
  const std::string checkpoint = " --checkpoint " + dir + "/ckpt.pt";
  const CommandResult straight = run(" --steps " + std::to_string(steps));
  EXPECT_EQ(straight.exit_code, 0) << straight.output;
  const CommandResult first_half = run(" --steps " + std::to_string(steps / 2) + checkpoint);
  EXPECT_EQ(first_half.exit_code, 0) << first_half.output;
  const CommandResult second_half =
      run(" --steps " + std::to_string(steps) + checkpoint + " --resume");
  EXPECT_EQ(second_half.exit_code, 0) << second_half.output;
  EXPECT_NE(second_half.output.find("resumed at step " + std::to_string(steps / 2)),
            std::string::npos)
      << second_half.output;

  auto expected = parse_loss_lines(straight.output);
  auto before = parse_loss_lines(first_half.output);
  auto after = parse_loss_lines(second_half.output);
  EXPECT_EQ(expected.size(), static_cast<size_t>(steps)) << straight.output;
  EXPECT_EQ(before.size(), static_cast<size_t>(steps / 2)) << first_half.output;
  EXPECT_EQ(after.size(), static_cast<size_t>(steps - steps / 2)) << second_half.output;
  for (const auto& [step, loss] : before) EXPECT_EQ(loss, expected[step]) << "step " << step;
  for (const auto& [step, loss] : after) EXPECT_EQ(loss, expected[step]) << "step " << step;
  return {straight.output, first_half.output, second_half.output};
}

TEST(MoeTrainTest, CheckpointResumeContinuesWithIdenticalLosses) {
  // Model, optimizer moments, expert bias and batch order all come back: the same numbers.
  expect_resume_gives_identical_losses(
      1, kSmallModel + " --balance aux-free --bias-update-rate 1e-2", 12, fresh_dir("checkpoint"));
}

// The checkpoint holds the placement each layer's rebalancer reached and its load forecast:
// the experts' weights and AdamW state are read back into the slots they were saved from, and
// the rebalancer decides at the same steps as the straight run, the same way.
TEST(MoeTrainTest, TwoRanksResumeARebalancedRunWithIdenticalLossesAndDecisions) {
  // A mild skew on every layer and the aux loss keep all experts busy, so an expert read into
  // the wrong slot changes the loss (with a collapsed router only the decisions would differ).
  // The imbalance rule decides from the loads alone; the cost rule's measured times differ from
  // run to run (and its fits start over after a resume).
  const ResumedRuns runs = expect_resume_gives_identical_losses(
      2,
      kSmallModel +
          " --balance aux --aux-loss-coeff 0.1 --gate-skew 2 --redundant-experts 2"
          " --rebalance-every 4 --rebalance-threshold 1.02 --rebalance-rule imbalance",
      16, fresh_dir("checkpoint_rebalance"));
  const auto expected = parse_rebalance_decisions(runs.straight);
  // Decisions at steps 3, 7, 11, 15 x 2 layers; some applied in each half, so the checkpoint
  // holds a moved placement and the resumed run moves experts again.
  ASSERT_EQ(expected.size(), 8u) << runs.straight;
  int applied_first = 0, applied_second = 0;
  for (const auto& [step, line] : expected) {
    if (line.find("applied") != std::string::npos) ++(step < 8 ? applied_first : applied_second);
  }
  EXPECT_GE(applied_first, 1) << runs.straight;
  EXPECT_GE(applied_second, 1) << runs.straight;
  auto resumed = parse_rebalance_decisions(runs.first_half);
  resumed.merge(parse_rebalance_decisions(runs.second_half));
  EXPECT_EQ(resumed, expected) << runs.first_half << runs.second_half;
}

// A checkpoint's extra entries must be there exactly when the resuming run uses them; an error
// names the entry and the option.
TEST(MoeTrainTest, ResumeNamesTheStateACheckpointLacksOrHolds) {
  const std::string dir = fresh_dir("checkpoint_entries");
  const std::string plain = dir + "/plain.pt", offloaded = dir + "/offloaded.pt",
                    rebalanced = dir + "/rebalanced.pt";
  for (const auto& [options, path] : {std::pair<std::string, std::string>{"", plain},
                                      {" --offload-cold-experts", offloaded},
                                      {" --rebalance-every 4", rebalanced}}) {
    const CommandResult run =
        run_shell(moe_train() + kSmallModel + options + " --steps 1 --checkpoint " + path);
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  const struct {
    std::string options, path, message;
  } cases[] = {
      {" --rebalance-every 4", plain, "has no expert placement (entry expert_rebalancer)"},
      {" --offload-cold-experts", plain,
       "has no offloaded experts' optimizer state (entry expert_offload)"},
      {"", offloaded, "(entry expert_offload): resume it with --offload-cold-experts"},
      {"", rebalanced, "(entry expert_rebalancer): resume it with --rebalance-every"},
  };
  for (const auto& c : cases) {
    CommandResult run = run_shell(moe_train() + kSmallModel + c.options +
                                  " --steps 2 --resume --checkpoint " + c.path);
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_NE(run.output.find(c.message), std::string::npos) << run.output;
  }
}

TEST(MoeTrainTest, ResumeRefusesACheckpointOfAnotherModel) {
  const std::string dir = fresh_dir("checkpoint_mismatch");
  ASSERT_EQ(
      run_shell(moe_train() + kSmallModel + " --steps 1 --checkpoint " + dir + "/c.pt").exit_code,
      0);
  CommandResult run = run_shell(moe_train() + kSmallModel + " --layers 1 --steps 2 --checkpoint " +
                                dir + "/c.pt --resume");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("was written by a different setup"), std::string::npos) << run.output;
}

// Allocator tuning, the fused-kernel switch and activation recompute change how a step runs,
// never what it computes (on CPU the fused kernels never apply).
TEST(MoeTrainTest, MallocTuningKernelSwitchAndRecomputeKeepTheLosses) {
  CommandResult tuned = run_shell(moe_train() + kSmallModel + " --steps 5");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  CommandResult untuned =
      run_shell(moe_train() + kSmallModel +
                " --steps 5 --no-malloc-tuning --no-fused-kernels --recompute-expert-activation");
  ASSERT_EQ(untuned.exit_code, 0) << untuned.output;
  const auto losses = parse_losses(tuned.output);
  ASSERT_EQ(losses.size(), 5u) << tuned.output;
  EXPECT_EQ(parse_losses(untuned.output), losses) << untuned.output;
}

// What --offload-cold-experts printed: one line per layer and decision.
struct OffloadLine {
  int64_t step = 0, layer = 0, host_bytes = 0;
  std::string offloaded, prefetched, on_host;
};

std::vector<OffloadLine> parse_offload_lines(const std::string& output) {
  const std::regex line(
      R"(offload step (\d+) layer (\d+) experts offloaded \[([^\]]*)\] prefetched \[([^\]]*)\] )"
      R"(on host \[([^\]]*)\] state on host \S+ KB \((\d+) bytes\))");
  std::vector<OffloadLine> lines;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    lines.push_back({std::stoll((*it)[1]), std::stoll((*it)[2]), std::stoll((*it)[6]), (*it)[3],
                     (*it)[4], (*it)[5]});
  }
  return lines;
}

// Offloading moves the routed experts' AdamW state between host and device by the forecast
// load; the update is AdamW on each expert's slice, elementwise like AdamW on the stacked
// tensors, so the losses are the very same numbers as without the offload.
TEST(MoeTrainTest, OffloadingColdExpertsKeepsTheLossesAndReportsTheHostBytes) {
  const std::string args = kSmallModel + " --steps 12";
  CommandResult plain = run_shell(moe_train() + args);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  // 8 x 32 tokens x top-2 over 4 experts: 128 per expert on average, so a threshold just
  // above it makes the less loaded experts of each layer cold.
  CommandResult offloaded = run_shell(moe_train() + args +
                                      " --offload-cold-experts --cold-load-threshold 130"
                                      " --offload-every 4");
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.output;
  const auto losses = parse_losses(plain.output);
  ASSERT_EQ(losses.size(), 12u) << plain.output;
  EXPECT_EQ(parse_losses(offloaded.output), losses) << offloaded.output;

  const std::vector<OffloadLine> lines = parse_offload_lines(offloaded.output);
  ASSERT_EQ(lines.size(), 3u * 2u) << offloaded.output;  // steps 3, 7, 11 x 2 layers
  int64_t most_host_bytes = 0;
  for (const OffloadLine& line : lines) {
    EXPECT_EQ((line.step + 1) % 4, 0) << "step " << line.step;
    // One expert's state: exp_avg + exp_avg_sq of w_gate_up [32, 128] and w_down [64, 32], fp32.
    const int64_t experts_on_host =
        line.on_host.empty() ? 0 : 1 + std::count(line.on_host.begin(), line.on_host.end(), ' ');
    EXPECT_EQ(line.host_bytes, experts_on_host * 2 * (32 * 128 + 64 * 32) * 4)
        << "step " << line.step << " layer " << line.layer;
    most_host_bytes = std::max(most_host_bytes, line.host_bytes);
  }
  EXPECT_GT(most_host_bytes, 0) << offloaded.output;
}

// The checkpoint holds every expert's AdamW state wherever it was (some on the host at the
// save) and the offload's load forecast: the resumed run trains and offloads like the straight one.
TEST(MoeTrainTest, OffloadedExpertsResumeFromACheckpointWithIdenticalLossesAndMoves) {
  const ResumedRuns runs = expect_resume_gives_identical_losses(
      1, kSmallModel + " --offload-cold-experts --cold-load-threshold 130 --offload-every 4", 12,
      fresh_dir("checkpoint_offload"));
  const std::vector<OffloadLine> expected = parse_offload_lines(runs.straight);
  ASSERT_EQ(expected.size(), 3u * 2u) << runs.straight;  // steps 3, 7, 11 x 2 layers
  bool on_host_at_save = false;
  for (const OffloadLine& line : expected) on_host_at_save |= line.step < 6 && line.host_bytes > 0;
  EXPECT_TRUE(on_host_at_save) << "no expert state was on the host when the checkpoint was saved";
  std::vector<OffloadLine> resumed = parse_offload_lines(runs.first_half);
  for (const OffloadLine& line : parse_offload_lines(runs.second_half)) resumed.push_back(line);
  ASSERT_EQ(resumed.size(), expected.size()) << runs.first_half << runs.second_half;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(resumed[i].step, expected[i].step);
    EXPECT_EQ(resumed[i].on_host, expected[i].on_host) << "step " << expected[i].step;
    EXPECT_EQ(resumed[i].offloaded, expected[i].offloaded) << "step " << expected[i].step;
    EXPECT_EQ(resumed[i].prefetched, expected[i].prefetched) << "step " << expected[i].step;
    EXPECT_EQ(resumed[i].host_bytes, expected[i].host_bytes) << "step " << expected[i].step;
  }
}

TEST(MoeTrainTest, OffloadingColdExpertsRefusesWhatItCannotKeep) {
  for (const std::string& other :
       {std::string("--rebalance-every"), std::string("--redundant-experts")}) {
    CommandResult run =
        run_shell(moe_train() + kSmallModel + " --steps 1 --offload-cold-experts " + other + " 4");
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("--offload-cold-experts with " + other), std::string::npos)
        << run.output;
  }
}

// Under `moescope record`, the offloaded bytes reach the trace as a memory counter.
TEST(MoeTrainTest, RecordedOffloadTraceHoldsTheOffloadedBytes) {
  const std::string dir = fresh_dir("recorded_offload");
  CommandResult run =
      run_shell("timeout 240 " + shell_quote(build_dir() + "/bin/moescope") + " record -o " +
                shell_quote(dir + "/run.%r.moetrace") + " -- " + moe_train() + kSmallModel +
                " --steps 8 --offload-cold-experts --cold-load-threshold 130 --offload-every 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::vector<OffloadLine> lines = parse_offload_lines(run.output);
  ASSERT_EQ(lines.size(), 2u * 2u) << run.output;
  std::map<int64_t, int64_t> printed_totals;  // step -> both layers' host bytes after it
  for (const OffloadLine& line : lines) printed_totals[line.step] += line.host_bytes;
  const int64_t printed_total = printed_totals[7];  // after the last decision
  ASSERT_GT(printed_total, 0) << run.output;

  std::vector<std::string> traces;
  glob_t found{};
  if (::glob((dir + "/run.*.moetrace").c_str(), 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) traces.emplace_back(found.gl_pathv[i]);
  }
  ::globfree(&found);
  ASSERT_EQ(traces.size(), 1u) << run.output;
  analysis::TraceModel model = analysis::load_traces(traces);
  for (const auto& error : model.errors) ADD_FAILURE() << error.message;
  ASSERT_EQ(model.processes.size(), 1u);
  const analysis::CounterTrack* offloaded = nullptr;
  for (const auto& counter : model.processes[0].counters) {
    if (model.name(counter.name) == "memory.optimizer_state_offloaded") offloaded = &counter;
  }
  ASSERT_NE(offloaded, nullptr) << "no memory.optimizer_state_offloaded counter";
  ASSERT_FALSE(offloaded->values.empty());
  // The last sample is the model-wide total recorded after the last decision, and every sample
  // is a model-wide total (0 before the first decision): never one layer's share alone.
  EXPECT_EQ(offloaded->values.back(), static_cast<double>(printed_total));
  for (double value : offloaded->values) {
    EXPECT_TRUE(value == 0.0 || value == static_cast<double>(printed_totals[3]) ||
                value == static_cast<double>(printed_totals[7]))
        << value << " is not a model-wide total";
  }
}

TEST(MoeTrainTest, BadOptionsNameTheOption) {
  CommandResult top_k = run_shell(moe_train() + " --experts 4 --top-k 5");
  EXPECT_EQ(top_k.exit_code, 2);
  EXPECT_NE(top_k.output.find("--top-k 5 is larger than --experts 4"), std::string::npos)
      << top_k.output;
  CommandResult balance = run_shell(moe_train() + " --balance sometimes");
  EXPECT_EQ(balance.exit_code, 2);
  EXPECT_NE(balance.output.find("--balance"), std::string::npos) << balance.output;
  CommandResult data = run_shell(moe_train() + " --steps 1 --data /nonexistent/texts");
  EXPECT_EQ(data.exit_code, 1);
  EXPECT_NE(data.output.find("/nonexistent/texts"), std::string::npos) << data.output;
  CommandResult world = run_shell("RANK=3 WORLD_SIZE=2 " + moe_train() + " --steps 1");
  EXPECT_EQ(world.exit_code, 1);
  EXPECT_NE(world.output.find("RANK=3 is not below WORLD_SIZE=2"), std::string::npos)
      << world.output;
}

}  // namespace
}  // namespace moescope::samples_test
