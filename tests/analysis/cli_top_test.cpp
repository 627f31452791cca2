// `moescope top --once` on a 64-rank, 20-layer job whose traces are half still being written:
// the frame stays bounded (the slowest and fastest ranks and the distribution, the most
// imbalanced layers) and finds the planted slow rank and hot expert. bench/top_refresh_bench
// does the same at 1,024 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "cli_test_support.h"
#include "moe_job_writer.h"

namespace fs = std::filesystem;
using moescope::testing::run_cli;

namespace {

// A job of 8 experts per layer with one slow rank (from `slow_from`) and one hot expert, e3 of
// `hot_layer`; no slow host.
moescope::testing::MoeJobConfig top_job(int ranks, int steps, int layers, int slow_rank,
                                        int slow_from, double slow_factor, int hot_layer) {
  moescope::testing::MoeJobConfig config;
  config.ranks = ranks;
  config.steps = steps;
  config.layers = layers;
  config.experts = 8;
  config.kernels_per_layer = 1;
  config.slow_rank = slow_rank;
  config.slow_from_step = slow_from;
  config.slow_factor = slow_factor;
  config.slow_host = -1;
  config.hot_layer = hot_layer;
  config.hot_expert = 3;
  return config;
}

// Cuts `trace` 10 bytes before `chunk_end`, as a writer still writing that chunk leaves it.
void cut_before(const std::string& trace, uint64_t chunk_end) {
  fs::resize_file(trace, chunk_end - 10);
}

int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TEST(CliTop, OnceAtManyRanksPrintsABoundedFrame) {
  const fs::path dir = fs::temp_directory_path() / ("cli_top_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config = top_job(64, 12, 20, 37, 2, 1.6, 13);
  config.chunk_bytes = 1;
  config.strings_first = true;
  config.start_unix_ns = unix_now_ns();  // a live job: its steps end about now
  const auto traces = moescope::testing::write_moe_job(config, dir.string());
  ASSERT_EQ(traces.size(), 64u);
  // Every other rank is still writing: its file ends inside a chunk, which is not damage.
  for (size_t r = 0; r < traces.size(); r += 2) {
    const std::vector<uint64_t> ends = moescope::testing::trace_chunk_ends(traces[r]);
    ASSERT_GT(ends.size(), 4u);
    cut_before(traces[r], ends[ends.size() - 2]);
  }
  auto frame = run_cli("top --once '" + dir.string() + "'");
  ASSERT_EQ(frame.exit_code, 0) << frame.out;
  const std::string& text = frame.out;
  EXPECT_NE(text.find("moescope top: 64 ranks (32 still writing), steps from step markers\n"),
            std::string::npos)
      << text;
  EXPECT_LE(std::count(text.begin(), text.end(), '\n'), 40) << text;
  EXPECT_NE(text.find("ranks between ..."), std::string::npos) << text;
  EXPECT_NE(text.find("over 64 ranks (last finished step):"), std::string::npos) << text;
  // The slowest rank heads the list, and is the straggler of the step every rank finished.
  EXPECT_NE(text.find("exposed comm\n37 "), std::string::npos) << text;
  EXPECT_NE(text.find("step 10 (finished on every rank): slowest rank 37,"), std::string::npos)
      << text;
  // 20 layers: the hot one first, the rest summarised.
  EXPECT_NE(text.find("hot experts (share of tokens)\n13 "), std::string::npos) << text;
  EXPECT_NE(text.find(" e3 "), std::string::npos) << text;
  EXPECT_NE(text.find("+14 more layers; over all 20:\n  max/mean"), std::string::npos) << text;
  // No damage reported: a partial last chunk is only not written yet.
  EXPECT_EQ(text.find("moescope top: ", 5), std::string::npos) << text;
  // Live and in step: no rank behind, not stalled.
  EXPECT_EQ(text.find("behind:"), std::string::npos) << text;
  EXPECT_EQ(text.find("stalled:"), std::string::npos) << text;
  if (!getenv("S6KEEP")) fs::remove_all(dir);
}

// A job whose files stopped growing an hour ago, two ranks' a minute before the others': the
// ranks behind are named, the one that never finished a step first; the job is called stalled
// with how long and its step time.
TEST(CliTop, RanksBehindAndAStalledJobAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("cli_top_stall_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config = top_job(5, 12, 2, 1, 20, 1.0, 1);
  config.chunk_bytes = 256;
  config.strings_first = true;
  const int64_t second_ns = 1'000'000'000;
  config.start_unix_ns = unix_now_ns() - 3600 * second_ns;
  const auto traces = moescope::testing::write_moe_job(config, dir.string());
  ASSERT_EQ(traces.size(), 5u);
  // Ranks 2 and 4 of the same job started a minute earlier, so they stopped a minute before
  // the others (the synthetic steps are short: their files' times say when).
  config.start_unix_ns -= 60 * second_ns;
  const auto earlier = moescope::testing::write_moe_job(config, (dir / "earlier").string());
  ASSERT_EQ(earlier.size(), 5u);
  for (int r : {2, 4}) fs::rename(earlier[r], traces[r]);
  fs::remove_all(dir / "earlier");
  for (size_t r = 0; r < traces.size(); ++r) {
    const std::vector<uint64_t> ends = moescope::testing::trace_chunk_ends(traces[r]);
    ASSERT_GT(ends.size(), 8u);
    // Rank 2 stopped half way through the run, rank 4 inside its first step, the others in
    // their last step. Rank 3's file ends half way too, but in the others' minute: its trace
    // trails theirs by milliseconds (as live files do, a flush apart), so it is not behind.
    cut_before(traces[r], r == 2 || r == 3 ? ends[ends.size() / 2]
                          : r == 4         ? ends[2]
                                           : ends[ends.size() - 2]);
  }
  auto frame = run_cli("top --once '" + dir.string() + "'");
  ASSERT_EQ(frame.exit_code, 0) << frame.out;
  const std::string& text = frame.out;
  EXPECT_NE(text.find("moescope top: 5 ranks (5 still writing)"), std::string::npos) << text;
  std::smatch behind;
  ASSERT_TRUE(std::regex_search(
      text, behind,
      std::regex("behind: 2 rank\\(s\\) more than a step behind step (\\d+): rank 4 with no step "
                 "finished, rank 2 at step (\\d+) \\((\\d+) s ago\\)\n")))
      << text;
  EXPECT_LT(std::stoll(behind[2]) + 1, std::stoll(behind[1])) << text;
  EXPECT_NEAR(std::stod(behind[3]), 3660.0, 30.0) << text;
  std::smatch stalled;
  ASSERT_TRUE(std::regex_search(
      text, stalled,
      std::regex("stalled: no rank still writing has finished a step for (\\d+) s \\(a step "
                 "took [0-9.]+ ms\\): hung in a collective")))
      << text;
  EXPECT_NEAR(std::stod(stalled[1]), 3600.0, 30.0) << text;
  // A job whose pauses (a checkpoint save) last longer: --stall-after above the hour.
  auto patient = run_cli("top --once --stall-after 7200 '" + dir.string() + "'");
  ASSERT_EQ(patient.exit_code, 0) << patient.out;
  EXPECT_EQ(patient.out.find("stalled:"), std::string::npos) << patient.out;
  EXPECT_NE(patient.out.find("behind: 2 rank(s)"), std::string::npos) << patient.out;
  if (!getenv("S6KEEP")) fs::remove_all(dir);
}

// A job hung an hour ago in its last step's all-reduce: ranks 0, 1 and 3 wait in it, rank 2
// never entered it. Under the stalled line, top names the collective, the ranks inside it and
// for how long, and the rank missing with the last collective it completed on that
// communicator. At 64 ranks the ranks inside are one run of rank numbers.
TEST(CliTop, AHungCollectiveAndTheRankThatNeverEnteredItAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("cli_top_hang_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config = top_job(4, 12, 2, 1, 20, 1.0, 1);
  config.strings_first = true;
  config.hang_missing_rank = 2;
  config.start_unix_ns = unix_now_ns() - int64_t(3600) * 1'000'000'000;
  ASSERT_EQ(moescope::testing::write_moe_job(config, (dir / "four").string()).size(), 4u);
  auto frame = run_cli("top --once '" + (dir / "four").string() + "'");
  ASSERT_EQ(frame.exit_code, 0) << frame.out;
  std::smatch stuck;
  ASSERT_TRUE(std::regex_search(
      frame.out, stuck,
      std::regex(R"re(stalled: [^\n]*\n  in all_reduce #11 of comm 0000000000000001: )re"
                 R"re(ranks 0-1, 3 waiting \(up to (\d+) s\); never entered it: rank 2 )re"
                 R"re(\(last completed all_reduce #10\)\n)re")))
      << frame.out;
  EXPECT_NEAR(std::stod(stuck[1]), 3600.0, 30.0) << frame.out;
  // Lockstep: every rank stopped together, none is behind.
  EXPECT_EQ(frame.out.find("behind:"), std::string::npos) << frame.out;

  config.ranks = 64;
  config.hang_missing_rank = 37;
  ASSERT_EQ(moescope::testing::write_moe_job(config, (dir / "many").string()).size(), 64u);
  auto many = run_cli("top --once '" + (dir / "many").string() + "'");
  ASSERT_EQ(many.exit_code, 0) << many.out;
  EXPECT_NE(many.out.find("  in all_reduce #11 of comm 0000000000000001: ranks 0-36, 38-63 "
                          "waiting (up to "),
            std::string::npos)
      << many.out;
  EXPECT_NE(many.out.find("never entered it: rank 37 (last completed all_reduce #10)\n"),
            std::string::npos)
      << many.out;
  // With --stall-after above the hour the job is not called stalled, and the line goes with it.
  auto patient = run_cli("top --once --stall-after 7200 '" + (dir / "four").string() + "'");
  ASSERT_EQ(patient.exit_code, 0) << patient.out;
  EXPECT_EQ(patient.out.find("  in all_reduce"), std::string::npos) << patient.out;
  if (!getenv("S6KEEP")) fs::remove_all(dir);
}

// A folder `top` may see but not list (no read permission) is said in one line naming it and
// why, not taken for an empty folder. As root, the permission is checked as user nobody.
TEST(CliTop, AFolderThatCannotBeListedIsSaid) {
  const fs::path dir =
      fs::temp_directory_path() / ("cli_top_unlistable_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const fs::path job = dir / "job";
  ASSERT_EQ(moescope::testing::write_moe_job(top_job(2, 4, 1, 1, 2, 1.0, 0), job.string()).size(),
            2u);
  using fs::perms;
  fs::permissions(dir, perms::owner_all | perms::group_exec | perms::others_exec);
  fs::permissions(job, perms::owner_write | perms::owner_exec | perms::group_exec |
                           perms::others_exec);  // see and enter, not list
  const bool root = geteuid() == 0;
  auto frame = run_cli("top --once '" + job.string() + "'",
                       root ? "setpriv --reuid=65534 --regid=65534 --clear-groups " : "");
  fs::permissions(job, perms::owner_all);
  EXPECT_EQ(frame.exit_code, 0) << frame.out;
  EXPECT_EQ(frame.out, "moescope top: " + job.string() + ": cannot list: Permission denied\n");
  if (!getenv("S6KEEP")) fs::remove_all(dir);
}

// A folder the job wrote into before: the earlier run's traces (other names, an hour earlier)
// are left out with one line, and the frame is the newest run's alone.
TEST(CliTop, AFolderWithAnEarlierRunShowsTheNewestRun) {
  const fs::path dir = fs::temp_directory_path() / ("cli_top_runs_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config = top_job(4, 6, 2, 2, 1, 1.5, 1);
  config.start_unix_ns -= int64_t(3600) * 1'000'000'000;
  const auto earlier = moescope::testing::write_moe_job(config, (dir / "earlier").string());
  ASSERT_EQ(earlier.size(), 4u);
  for (size_t r = 0; r < earlier.size(); ++r) {
    fs::rename(earlier[r], dir / ("a_earlier." + std::to_string(r) + ".moetrace"));
  }
  config.start_unix_ns += int64_t(3600) * 1'000'000'000;
  config.steps = 9;
  config.slow_rank = 1;
  ASSERT_EQ(moescope::testing::write_moe_job(config, dir.string()).size(), 4u);
  auto frame = run_cli("top --once '" + dir.string() + "'");
  ASSERT_EQ(frame.exit_code, 0) << frame.out;
  const std::string& text = frame.out;
  EXPECT_NE(text.find("moescope top: 4 ranks"), std::string::npos) << text;
  EXPECT_NE(text.find("step 8 (finished on every rank): slowest rank 1,"), std::string::npos)
      << text;
  EXPECT_NE(text.find("moescope top: following the newest run; left out 4 file(s) of another "
                      "run, first " +
                      (dir / "a_earlier.0.moetrace").string() + ": refused: rank 0 of 4 again"),
            std::string::npos)
      << text;
  if (!getenv("S6KEEP")) fs::remove_all(dir);
}
