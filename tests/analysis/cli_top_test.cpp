// `moescope top --once` on a 64-rank, 20-layer job whose traces are half still being written:
// the frame stays bounded (the slowest and fastest ranks and the distribution, the most
// imbalanced layers) and finds the planted slow rank and hot expert. bench/top_refresh_bench
// does the same at 1,024 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_test_support.h"
#include "moe_job_writer.h"
#include "moescope/trace/trace_reader.h"

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

}  // namespace

TEST(CliTop, OnceAtManyRanksPrintsABoundedFrame) {
  const fs::path dir = fs::temp_directory_path() / ("cli_top_" + std::to_string(getpid()));
  fs::remove_all(dir);
  moescope::testing::MoeJobConfig config = top_job(64, 12, 20, 37, 2, 1.6, 13);
  config.chunk_bytes = 1;
  config.strings_first = true;
  const auto traces = moescope::testing::write_moe_job(config, dir.string());
  ASSERT_EQ(traces.size(), 64u);
  // Every other rank is still writing: its file ends inside a chunk, which is not damage.
  for (size_t r = 0; r < traces.size(); r += 2) {
    moescope::trace::TraceReader reader;
    ASSERT_TRUE(reader.open(traces[r]));
    std::vector<uint64_t> ends;
    moescope::trace::Chunk chunk;
    while (reader.next_chunk(chunk)) ends.push_back(reader.position());
    ASSERT_GT(ends.size(), 4u);
    fs::resize_file(traces[r], ends[ends.size() - 2] - 10);
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
