#include <gtest/gtest.h>

#include "trace_path.h"

namespace moescope::recorder {
namespace {

TEST(TracePath, ExpandsPlaceholders) {
  ProcessIdentity identity;
  identity.rank = 3;
  identity.pid = 1234;
  identity.host = "node7";
  EXPECT_EQ(expand_trace_path("run.%r.moetrace", identity), "run.3.moetrace");
  EXPECT_EQ(expand_trace_path("%h/%p-%r-100%%", identity), "node7/1234-3-100%");
  EXPECT_EQ(expand_trace_path("odd%q%", identity), "odd%q%");
  identity.rank = -1;
  EXPECT_EQ(expand_trace_path("r%r", identity), "r0");
}

TEST(TracePath, RankComesFromTheLaunchersVariables) {
  for (const char* name : {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                           "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}) {
    unsetenv(name);
  }
  EXPECT_EQ(current_process_identity().rank, -1);
  setenv("SLURM_PROCID", "7", 1);
  EXPECT_EQ(current_process_identity().rank, 7);
  setenv("OMPI_COMM_WORLD_RANK", "6", 1);
  EXPECT_EQ(current_process_identity().rank, 6);
  setenv("RANK", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "16", 1);
  auto identity = current_process_identity();
  EXPECT_EQ(identity.rank, 2);
  EXPECT_EQ(identity.local_rank, 1);
  EXPECT_EQ(identity.world_size, 16);
  setenv("RANK", "garbage", 1);
  EXPECT_EQ(current_process_identity().rank, 6);  // falls through to the next variable
  EXPECT_NE(current_process_identity().command_line.find("recorder_internals_test"),
            std::string::npos);
}

TEST(TracePath, MetadataMergesExtraObjectAndRejectsOthers) {
  ProcessIdentity identity;
  identity.rank = 1;
  std::string merged = build_metadata_json(identity, R"({"gpus":["H200"],"rank":9})", 5);
  EXPECT_NE(merged.find(R"("gpus":["H200"])"), std::string::npos);
  EXPECT_NE(merged.find(R"("rank":9)"), std::string::npos);  // the caller's value wins
  EXPECT_NE(merged.find(R"("start_ns":5)"), std::string::npos);
  ::testing::internal::CaptureStderr();
  std::string kept = build_metadata_json(identity, "[1,2", 5);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("not a JSON object"), std::string::npos);
  EXPECT_NE(kept.find(R"("rank":1)"), std::string::npos);
}

}  // namespace
}  // namespace moescope::recorder
