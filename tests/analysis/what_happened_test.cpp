// "What happened" on flight-recorder dumps (what_happened.h): three ranks, rank 1 never entered
// the all_reduce the others wait in; built as the loader would leave the model.
#include <gtest/gtest.h>

#include <string>

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

TEST(WhatHappened, NothingWithoutTriggers) {
  TraceModel model = three_rank_hang();
  for (auto& process : model.processes) process.triggers.clear();
  WhatHappened what = explain_dump(model);
  EXPECT_FALSE(what.any);
  EXPECT_EQ(render_what_happened(what, ReportFormat::kText), "");
  EXPECT_EQ(what_happened_json(what), "null");
}

}  // namespace
}  // namespace moescope::analysis
