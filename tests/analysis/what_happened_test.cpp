// "What happened" on flight-recorder dumps (what_happened.h): three ranks, rank 1 never entered
// the all_reduce the others wait in; built as the loader would leave the model. And on a regular
// recording whose traces end inside a collective (collective_open records, no trigger).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "moe_job_writer.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/analysis/what_happened.h"

namespace moescope::analysis {
namespace {

// A dump's metadata as the shim writes it (flight_monitor.cpp).
std::string dump_metadata(bool open, uint32_t completed) {
  std::string collective = R"({"comm_id":"00000000000000ab","rank":0,"num_ranks":3,)"
                           R"("last_completed":{"sequence":)" +
                           std::to_string(completed) + R"(,"kind":1,"bytes":4096,"ago_ns":1})";
  if (open) {
    collective += R"(,"last_entered":{"sequence":5,"kind":1,"bytes":4096,"ago_ns":3000000000})";
  }
  collective += std::string(R"(,"open":)") + (open ? "true" : "false") + "}";
  return R"({"flight_recorder":{"trigger":{"reason":8,"origin_reason":2},)"
         R"("last_progress_ago_ns":3000000000,)"
         R"("collectives":[)" +
         collective + R"(],"python_stacks":"Thread 0x1 (most recent call first):\n  File x"}})";
}

TraceModel three_rank_hang() {
  TraceModel model;
  for (int rank = 0; rank < 3; ++rank) {
    ProcessTrack process;
    process.rank = rank;
    process.pid = 100 + rank;
    bool waiting = rank != 1;
    process.metadata_json = dump_metadata(waiting, 4);
    TriggerEvent trigger;
    trigger.time = 1000 + rank;
    trigger.reason = rank == 2 ? 2u : 8u;  // rank 2's watchdog fired, the others followed
    trigger.origin_rank = 2;
    process.triggers.push_back(trigger);
    model.processes.push_back(process);
  }
  return model;
}

TEST(WhatHappened, NamesTheRankThatNeverEnteredTheCollective) {
  TraceModel model = three_rank_hang();
  WhatHappened what = explain_dump(model);
  ASSERT_TRUE(what.any);
  EXPECT_EQ(what.first.reason, 2u);
  EXPECT_EQ(what.first_rank, 2);
  ASSERT_EQ(what.mismatches.size(), 1u);
  EXPECT_EQ(what.mismatches[0].sequence, 5u);
  EXPECT_EQ(what.mismatches[0].never_entered, std::vector<int32_t>{1});
  EXPECT_EQ(what.mismatches[0].waiting, (std::vector<int32_t>{0, 2}));
  std::string text = render_what_happened(what, ReportFormat::kText);
  EXPECT_EQ(text.rfind("What happened", 0), 0u) << text;
  EXPECT_NE(text.find("all_reduce #5 of comm 00000000000000ab: rank 1 never entered it; ranks "
                      "0, 2 wait in it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Trigger: hang"), std::string::npos) << text;
  EXPECT_NE(text.find("peer (rank 2: hang)"), std::string::npos) << text;
  EXPECT_NE(text.find("Thread 0x1"), std::string::npos) << text;
  EXPECT_NE(what_happened_json(what).find("\"never_entered\":[1]"), std::string::npos);
}

// Two all_reduces in flight on the communicator (#5 and #6, as with prefetching): the dump says
// the earliest still open, #5, is the one the ranks wait in (a communicator runs in order).
TEST(WhatHappened, WithCollectivesInFlightTheEarliestOpenIsTheOneWaitedIn) {
  TraceModel model = three_rank_hang();
  for (auto& process : model.processes) {
    std::string& metadata = process.metadata_json;
    const std::string latest = R"("last_entered":{"sequence":5,)";
    const size_t at = metadata.find(latest);
    if (at == std::string::npos) continue;  // rank 1 entered neither
    metadata.replace(at, latest.size(),
                     R"("earliest_open":{"sequence":5,"kind":1,"bytes":4096,"ago_ns":3000000000},)"
                     R"("open_collectives":2,"last_entered":{"sequence":6,)");
  }
  WhatHappened what = explain_dump(model);
  ASSERT_EQ(what.mismatches.size(), 1u);
  EXPECT_EQ(what.mismatches[0].sequence, 5u);
  EXPECT_EQ(what.mismatches[0].never_entered, std::vector<int32_t>{1});
}

TEST(WhatHappened, NothingWithoutTriggers) {
  TraceModel model = three_rank_hang();
  for (auto& process : model.processes) process.triggers.clear();
  WhatHappened what = explain_dump(model);
  EXPECT_FALSE(what.any);
  EXPECT_EQ(render_what_happened(what, ReportFormat::kText), "");
  EXPECT_EQ(what_happened_json(what), "null");
}

// A job recorded without the flight recorder hangs in its last all-reduce and is stopped: the
// traces (written as the recorder writes them, collective_open records for the ranks waiting)
// say which rank never entered it, with no trigger.
TEST(WhatHappened, ARecordingThatEndsInsideACollectiveNamesTheRankMissing) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("what_happened_" + std::to_string(getpid()));
  fs::remove_all(dir);
  testing::MoeJobConfig config;
  config.ranks = 4;
  config.steps = 6;
  config.experts = 8;
  config.expert_parallel = 4;
  config.slow_host = -1;
  config.hang_missing_rank = 2;
  config.hang_stopped_after_ns = 30'000'000'000;  // the scheduler stops it 30 s into the hang
  const std::vector<std::string> paths = testing::write_moe_job(config, dir.string());
  ASSERT_EQ(paths.size(), 4u);
  WhatHappened what = explain_dump(load_traces(paths));
  fs::remove_all(dir);
  ASSERT_TRUE(what.any);
  EXPECT_EQ(what.first_rank, -1);
  ASSERT_EQ(what.mismatches.size(), 1u);
  EXPECT_EQ(what.mismatches[0].comm_id, 1u);
  EXPECT_EQ(what.mismatches[0].sequence, 5u);
  EXPECT_EQ(what.mismatches[0].never_entered, std::vector<int32_t>{2});
  EXPECT_EQ(what.mismatches[0].waiting, (std::vector<int32_t>{0, 1, 3}));
  ASSERT_EQ(what.ranks.size(), 4u);
  ASSERT_FALSE(what.ranks[0].collectives.empty());
  EXPECT_EQ(what.ranks[0].collectives.front().comm_id, 1u);  // sorted by communicator
  EXPECT_TRUE(what.ranks[0].collectives.front().has_open);
  std::string text = render_what_happened(what, ReportFormat::kText);
  EXPECT_NE(text.find("No flight-recorder trigger: the traces end with ranks inside a collective"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Collective all_reduce #5 of comm 0000000000000001: rank 2 never entered "
                      "it; ranks 0-1, 3 wait in it"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 2 (pid "), std::string::npos) << text;
  EXPECT_NE(text.find("last completed all_reduce #4"), std::string::npos) << text;
  // How long each waiting rank had waited when the recording stopped: from its entry (the record
  // is written a second in, but keeps the entry's time) to its closing statistics record.
  for (int rank : {0, 1, 3}) {
    ASSERT_FALSE(what.ranks[size_t(rank)].collectives.empty());
    EXPECT_NEAR(what.ranks[size_t(rank)].collectives.front().open_for_s, 30.0, 1e-3) << rank;
  }
  EXPECT_NE(text.find("open: all_reduce #5 (64.0 MiB), for 30.0 s"), std::string::npos) << text;
  const std::string json = what_happened_json(what);
  EXPECT_NE(json.find("\"trigger\":null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"never_entered\":[2]"), std::string::npos) << json;
}

// At 64 ranks the section stays short: the ranks waiting are runs of rank numbers, and only the
// rank that never entered gets its story.
TEST(WhatHappened, AtManyRanksOnlyTheRankMissingIsToldOneByOne) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("what_happened_64_" + std::to_string(getpid()));
  fs::remove_all(dir);
  testing::MoeJobConfig config;
  config.ranks = 64;
  config.steps = 4;
  config.experts = 8;
  config.slow_host = -1;
  config.hang_missing_rank = 37;
  const std::vector<std::string> paths = testing::write_moe_job(config, dir.string());
  ASSERT_EQ(paths.size(), 64u);
  const std::string text =
      render_what_happened(explain_dump(load_traces(paths)), ReportFormat::kText);
  fs::remove_all(dir);
  EXPECT_NE(text.find("Collective all_reduce #3 of comm 0000000000000001: rank 37 never entered "
                      "it; ranks 0-36, 38-63 wait in it\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    rank 37 (pid "), std::string::npos) << text;
  EXPECT_EQ(text.find("    rank 36 (pid "), std::string::npos) << text;
  EXPECT_NE(text.find("    63 other ranks (`--format json` lists every rank)\n"), std::string::npos)
      << text;
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 20) << text;
}

// A rank that shows nothing of a communicator never entered its collective only when the
// communicator spans every rank: the other ranks of a job are not members of a subgroup's.
TEST(WhatHappened, ASubgroupsOtherRanksAreNotCalledMissing) {
  std::vector<RankCollectives> ranks(4);
  for (int32_t r = 0; r < 4; ++r) ranks[size_t(r)].rank = r;
  CollectiveState inside;
  inside.comm_id = 0xab;
  inside.num_ranks = 2;
  inside.has_completed = true;
  inside.completed_sequence = 4;
  inside.has_open = true;
  inside.open_sequence = 5;
  CollectiveState behind = inside;
  behind.has_open = false;
  ranks[0].collectives = {inside};
  ranks[1].collectives = {behind};
  std::vector<CollectiveMismatch> stuck = collective_mismatches(ranks);
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0].waiting, std::vector<int32_t>{0});
  EXPECT_EQ(stuck[0].never_entered, std::vector<int32_t>{1});
  // The same communicator over all four ranks: ranks 2 and 3 never reached it either.
  ranks[0].collectives[0].num_ranks = ranks[1].collectives[0].num_ranks = 4;
  stuck = collective_mismatches(ranks);
  ASSERT_EQ(stuck.size(), 1u);
  EXPECT_EQ(stuck[0].never_entered, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(rank_runs(stuck[0].never_entered), "1-3");
}

// A collective_open whose collective's end went unreported, followed by more steps, is no hang.
TEST(WhatHappened, AnOpenCollectiveFollowedBySteppingIsNoHang) {
  TraceModel model;
  ProcessTrack process;
  CollectiveOpen open;
  open.time = 100;
  open.comm_id = 7;
  open.sequence = 3;
  open.num_ranks = 2;
  process.collectives_open.push_back(open);
  process.step_markers.push_back({4, 500, false});
  process.end = 600;
  model.processes.push_back(process);
  EXPECT_FALSE(explain_dump(model).any);
  model.processes[0].step_markers.front().time = 50;  // the step began before: it hangs there
  EXPECT_TRUE(explain_dump(model).any);
}

}  // namespace
}  // namespace moescope::analysis
