// Files of two jobs are never read as one: traces of different world sizes, one rank recorded at
// two times, or recordings hours apart (a torch.profiler folder written on several days) are
// refused, naming the first file's job; ranks of one job, recorded together, are not.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moescope/analysis/rank_summary.h"
#include "moescope/analysis/summary_load.h"
#include "moescope/analysis/trace_loader.h"
#include "rank_numbering.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

constexpr int64_t kSecondNs = 1'000'000'000;
constexpr int64_t kDayNs = 86'400 * kSecondNs;
constexpr int64_t kUnixNs = 1'700'000'000 * kSecondNs;  // November 2023

struct KinetoFile {
  std::string name;
  int thread = 0;  // each file's own OS thread: the files are different processes
  std::optional<int> rank, world_size;
  std::optional<int64_t> base_time_ns;  // newer torch: ts count from it
  double first_ts_us = 1'000;           // older torch: unix time in us, no base
};

KinetoFile unranked(std::string name, int thread, std::optional<int64_t> base_time_ns = {}) {
  KinetoFile file;
  file.name = std::move(name);
  file.thread = thread;
  file.base_time_ns = base_time_ns;
  return file;
}

KinetoFile ranked(std::string name, int thread, int rank, int world_size, int64_t base_time_ns) {
  KinetoFile file = unranked(std::move(name), thread, base_time_ns);
  file.rank = rank;
  file.world_size = world_size;
  return file;
}

// A torch.profiler trace of two 10 ms steps on one thread.
std::string write(const std::string& directory, const KinetoFile& file) {
  nlohmann::json events = nlohmann::json::array();
  for (int step = 0; step < 2; ++step) {
    events.push_back({{"ph", "X"},
                      {"cat", "user_annotation"},
                      {"name", "ProfilerStep#" + std::to_string(step)},
                      {"pid", file.thread},
                      {"tid", file.thread},
                      {"ts", file.first_ts_us + step * 10'000.0},
                      {"dur", 9'000.0}});
  }
  nlohmann::json trace = {{"schemaVersion", 1}, {"traceEvents", events}};
  if (file.rank)
    trace["distributedInfo"] = {{"rank", *file.rank}, {"world_size", *file.world_size}};
  if (file.base_time_ns) trace["baseTimeNanoseconds"] = *file.base_time_ns;
  const std::string path = directory + "/" + file.name;
  std::ofstream(path) << trace.dump();
  return path;
}

// The message of each refused file, by path ("" when not refused).
std::vector<std::string> refusals(const TraceModel& model, const std::vector<std::string>& paths) {
  std::vector<std::string> messages(paths.size());
  for (const LoadError& error : model.errors) {
    for (size_t i = 0; i < paths.size(); ++i) {
      if (error.refused && error.file == paths[i]) messages[i] = error.message;
    }
  }
  return messages;
}

TEST(OtherJobs, DifferentWorldSizesAreTwoJobs) {
  const std::string directory = testing::test_directory("other_jobs_world");
  const std::vector<std::string> paths = {
      write(directory, ranked("a.json", 11, 0, 2, kUnixNs)),
      write(directory, ranked("b.json", 12, 1, 2, kUnixNs)),
      write(directory, ranked("c.json", 13, 1, 128, kUnixNs)),
  };
  const TraceModel model = load_traces(paths);
  EXPECT_EQ(model.processes.size(), 2u);
  const auto messages = refusals(model, paths);
  EXPECT_EQ(messages[0], "");
  EXPECT_EQ(messages[1], "");
  EXPECT_NE(messages[2].find("rank 1 of 128 here, rank 0 of 2 in " + paths[0] +
                             ": not one job (the world sizes differ)"),
            std::string::npos)
      << messages[2];
  EXPECT_NE(messages[2].find("moescope diff BASE --against NEW"), std::string::npos);
}

TEST(OtherJobs, OneRankAtTwoTimesIsTwoRuns) {
  const std::string directory = testing::test_directory("other_jobs_rank");
  // A minute apart: not far enough for the gap rule, but rank 0 cannot run twice in one job.
  const std::vector<std::string> paths = {
      write(directory, ranked("first.json", 21, 0, 2, kUnixNs)),
      write(directory, ranked("again.json", 22, 0, 2, kUnixNs + 60 * kSecondNs)),
  };
  const auto messages = refusals(load_traces(paths), paths);
  EXPECT_EQ(messages[0], "");
  EXPECT_NE(messages[1].find("rank 0 of 2 again (" + paths[0] +
                             " is rank 0 too), recorded at another time: two runs"),
            std::string::npos)
      << messages[1];
  // At the same time, two processes stating one rank (ranks from LOCAL_RANK on two nodes) are
  // kept: the loader numbers them by position.
  const std::vector<std::string> together = {
      write(directory, ranked("node0.json", 23, 0, 2, kUnixNs)),
      write(directory, ranked("node1.json", 24, 0, 2, kUnixNs + 2'000'000)),
  };
  const TraceModel both = load_traces(together);
  EXPECT_EQ(both.processes.size(), 2u);
  EXPECT_EQ(refusals(both, together), std::vector<std::string>(2));
  // ... and said so, naming both files.
  ASSERT_EQ(both.errors.size(), 1u);
  EXPECT_FALSE(both.errors[0].refused);
  EXPECT_EQ(both.errors[0].file, together[1]);
  EXPECT_EQ(both.errors[0].message, "states rank 0 as " + together[0] +
                                        " does (a local rank on two nodes?): ranks numbered by "
                                        "file order");
}

// One rule numbers the ranks for the traces' loader, the summaries and `moescope top`.
TEST(RankNumbering, StatedRanksWhenDistinctElseFileOrderWithWhy) {
  const std::vector<std::string> files = {"a", "b", "c"};
  const RankNumbering distinct = number_ranks({2, 0, 1}, files);
  EXPECT_EQ(distinct.ranks, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(distinct.why_by_position, "");
  const RankNumbering repeated = number_ranks({0, 1, 0}, files);
  EXPECT_EQ(repeated.ranks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(repeated.file, "c");
  EXPECT_EQ(repeated.why_by_position,
            "states rank 0 as a does (a local rank on two nodes?): ranks numbered by file order");
  const RankNumbering mixed = number_ranks({-1, 4, 5}, files);
  EXPECT_EQ(mixed.ranks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(mixed.file, "a");
  EXPECT_EQ(mixed.why_by_position, "states no rank, b states rank 4: ranks numbered by file order");
  // A program that is not distributed states none: numbered by position, nothing to say.
  const RankNumbering none = number_ranks({-1, -1, -1}, files);
  EXPECT_EQ(none.ranks, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(none.why_by_position, "");
}

TEST(OtherJobs, RecordingsHoursApartAreAnotherRun) {
  const std::string directory = testing::test_directory("other_jobs_gap");
  // Older torch.profiler versions: ts are unix times in microseconds, no baseTimeNanoseconds.
  KinetoFile unix_ts = ranked("unix.json", 34, 3, 4, 0);
  unix_ts.base_time_ns.reset();
  unix_ts.first_ts_us = double(kUnixNs + 3 * kDayNs) / 1e3;
  const std::vector<std::string> paths = {
      write(directory, ranked("first.json", 31, 0, 4, kUnixNs)),
      write(directory, ranked("later.json", 32, 1, 4, kUnixNs + kDayNs)),
      write(directory, ranked("soon_after.json", 33, 2, 4, kUnixNs + 300 * kSecondNs)),
      write(directory, unix_ts),
  };
  const TraceModel model = load_traces(paths);
  EXPECT_EQ(model.processes.size(), 2u);
  const auto messages = refusals(model, paths);
  EXPECT_EQ(messages[0], "");
  EXPECT_NE(messages[1].find("recorded 24 hours apart from " + paths[0] +
                             " (the ranks of one run are recorded together): another run, or "
                             "another moment of this one"),
            std::string::npos)
      << messages[1];
  EXPECT_EQ(messages[2], "") << "5 minutes after the first: the same run";
  EXPECT_NE(messages[3].find("recorded 3 days apart from " + paths[0]), std::string::npos)
      << messages[3];
}

TEST(OtherJobs, TwoRecordingsOfAProgramThatIsNotDistributedAreTwoRuns) {
  const std::string directory = testing::test_directory("other_jobs_unranked");
  // A script profiled twice into one folder, a minute apart: each run is one process, no rank.
  const std::vector<std::string> paths = {
      write(directory, unranked("run1.json", 51, kUnixNs)),
      write(directory, unranked("run2.json", 52, kUnixNs + 60 * kSecondNs)),
  };
  const auto messages = refusals(load_traces(paths), paths);
  EXPECT_EQ(messages[0], "");
  EXPECT_NE(messages[1].find("recorded at another time than " + paths[0] +
                             " (no overlap), and neither states a rank: two runs of a program "
                             "that is not distributed"),
            std::string::npos)
      << messages[1];
  // Processes recorded at the same time are kept (ranks launched without a rank variable).
  const std::vector<std::string> together = {
      write(directory, unranked("worker1.json", 53, kUnixNs)),
      write(directory, unranked("worker2.json", 54, kUnixNs + 5'000'000)),
  };
  EXPECT_EQ(load_traces(together).processes.size(), 2u);
  // Without a wall clock (ts from 0, no base), nothing says when a file was recorded: kept.
  const std::vector<std::string> unknown = {
      write(directory, unranked("x.json", 55)),
      write(directory, unranked("y.json", 56)),
  };
  EXPECT_EQ(load_traces(unknown).processes.size(), 2u);
}

// Hostile clocks (a base time at the int64 limit) are compared without overflow (UBSan in CI):
// such a file is only ever another run's, far in the future.
TEST(OtherJobs, ClocksAtTheInt64LimitAreComparedWithoutOverflow) {
  const std::string directory = testing::test_directory("other_jobs_hostile");
  const std::vector<std::string> paths = {
      write(directory, ranked("first.json", 61, 0, 2, kUnixNs)),
      write(directory, ranked("far.json", 62, 1, 2, std::numeric_limits<int64_t>::max())),
      write(directory, unranked("alone.json", 63, std::numeric_limits<int64_t>::max())),
  };
  const TraceModel model = load_traces(paths);
  EXPECT_EQ(model.processes.size(), 1u);
  const auto messages = refusals(model, paths);
  EXPECT_EQ(messages[0], "");
  EXPECT_NE(messages[1].find("days apart from " + paths[0]), std::string::npos) << messages[1];
  EXPECT_NE(messages[2].find("days apart from " + paths[0]), std::string::npos) << messages[2];
}

// Rank summaries say the same: summaries of two runs are not merged; their traces are read, and
// the other run's is refused.
TEST(OtherJobs, SummariesOfAnotherRunAreRefusedToo) {
  const std::string directory = testing::test_directory("other_jobs_summaries");
  const std::vector<std::string> paths = {
      write(directory, ranked("rank0.json", 41, 0, 2, kUnixNs)),
      write(directory, ranked("rank1.json", 42, 1, 2, kUnixNs)),
      write(directory, ranked("rank1_next_day.json", 43, 1, 2, kUnixNs + kDayNs)),
  };
  for (const std::string& path : paths) {
    const TraceModel model = load_traces({path});
    ASSERT_EQ(model.processes.size(), 1u) << path;
    std::string error;
    ASSERT_TRUE(write_rank_summary(summary_path_for(path),
                                   summarize_process(model, 0, std::filesystem::file_size(path)),
                                   error))
        << error;
  }
  const SummaryLoad one_run = load_rank_summaries({paths[0], paths[1]});
  EXPECT_EQ(one_run.refused, "");
  EXPECT_FALSE(one_run.needs_traces);
  EXPECT_EQ(one_run.model.processes.size(), 2u);
  // Two runs: read from the traces, whose loader refuses the other run's file by the same rule.
  const SummaryLoad two_runs = load_rank_summaries(paths);
  EXPECT_TRUE(two_runs.needs_traces);
  ASSERT_FALSE(two_runs.notes.empty());
  EXPECT_EQ(two_runs.notes.back(), paths[2] + " may be of another run: read from the traces");
  const auto messages = refusals(load_traces(trace_inputs(paths)), paths);
  EXPECT_NE(messages[2].find("refused: rank 1 of 2 again (" + paths[1]), std::string::npos)
      << messages[2];
}

}  // namespace
}  // namespace moescope::analysis
