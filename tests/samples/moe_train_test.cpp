// moe_train as a user runs it: one and two ranks learn the shipped text, a checkpoint resumes
// to the very same losses, bad options are refused with a message naming them.
#include <gtest/gtest.h>

#include <regex>
#include <string>

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

TEST(MoeTrainTest, TwoRanksRebalanceASkewedLayerAndStillLearn) {
  const std::string dir = fresh_dir("rebalance");
  // Layer 1's router prefers experts 0 and 1 (rank 0's): the rebalancer moves and replicates
  // experts so both ranks get work, over the process group, while training goes on.
  CommandResult run = run_ranks(2,
                                kSmallModel +
                                    " --steps 24 --gate-skew 4 --skew-layer 1 --redundant-experts 2"
                                    " --rebalance-every 8 --dispatch-pool --receive-cap 100000",
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
  CommandResult refused =
      run_shell(moe_train() + " --steps 1 --rebalance-every 5 --checkpoint " + dir + "/c.pt");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("--rebalance-every with --checkpoint"), std::string::npos)
      << refused.output;
}

TEST(MoeTrainTest, CheckpointResumeContinuesWithIdenticalLosses) {
  const std::string dir = fresh_dir("checkpoint");
  const std::string args = kSmallModel + " --balance aux-free --bias-update-rate 1e-2";
  CommandResult straight = run_shell(moe_train() + args + " --steps 12");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  CommandResult first_half =
      run_shell(moe_train() + args + " --steps 6 --checkpoint " + dir + "/ckpt.pt");
  ASSERT_EQ(first_half.exit_code, 0) << first_half.output;
  CommandResult resumed =
      run_shell(moe_train() + args + " --steps 12 --checkpoint " + dir + "/ckpt.pt --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed at step 6"), std::string::npos) << resumed.output;

  auto expected = parse_loss_lines(straight.output);
  auto before = parse_loss_lines(first_half.output);
  auto after = parse_loss_lines(resumed.output);
  ASSERT_EQ(expected.size(), 12u);
  ASSERT_EQ(before.size(), 6u);
  ASSERT_EQ(after.size(), 6u) << resumed.output;
  for (const auto& [step, loss] : before) EXPECT_EQ(loss, expected[step]) << "step " << step;
  // Model, optimizer moments, expert bias and batch order all come back: the same numbers.
  for (const auto& [step, loss] : after) EXPECT_EQ(loss, expected[step]) << "step " << step;
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

// Allocator tuning and the fused-kernel switch change how a step runs, never what it computes
// (on CPU the fused kernels never apply).
TEST(MoeTrainTest, MallocTuningAndKernelSwitchKeepTheLosses) {
  CommandResult tuned = run_shell(moe_train() + kSmallModel + " --steps 5");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  CommandResult untuned =
      run_shell(moe_train() + kSmallModel + " --steps 5 --no-malloc-tuning --no-fused-kernels");
  ASSERT_EQ(untuned.exit_code, 0) << untuned.output;
  const auto losses = parse_losses(tuned.output);
  ASSERT_EQ(losses.size(), 5u) << tuned.output;
  EXPECT_EQ(parse_losses(untuned.output), losses) << untuned.output;
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
