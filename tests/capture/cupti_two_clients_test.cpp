// Two CUPTI clients in one process: moescope's capture and the program's own profiler (as
// torch.profiler's Kineto is), against a stand-in libcupti.so.13 that enforces CUPTI 13.0's
// rules (cupti_rules_for_tests.cpp: one subscriber; process-wide buffer callbacks; a buffer
// reaching a client that did not allocate it is counted). The program runs under the real
// `moescope record`; neither tool may crash or take the other's buffers, and the trace says
// what happened, naming the other client.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "capture_test_support.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;

std::vector<std::string> kernel_names(const LoadedTrace& loaded) {
  std::vector<std::string> names;
  for (const auto& record : loaded.of_kind(trace::RecordKind::kGpuKernel)) {
    names.push_back(name_of(loaded, record.header().name));
  }
  return names;
}

bool has_note_starting(const LoadedTrace& loaded, const std::string& prefix) {
  for (const std::string& name : loaded.instant_names()) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

RunResult run_two_clients(const std::string& trace_path, const std::vector<std::string>& arguments,
                          const std::string& cupti_mode) {
  std::vector<std::string> command = {build_dir() + "/tests/cupti_two_clients_program"};
  command.insert(command.end(), arguments.begin(), arguments.end());
  RunOptions options;
  // A library every machine has stands in for libcuda.so.1; the stand-in CUPTI is the one the
  // program loaded (the shim finds an already-loaded libcupti.so.13 first).
  options.environment["MOESCOPE_CUDA_DRIVER_LIBRARY"] = "libz.so.1";
  options.environment["MOESCOPE_CUPTI"] = cupti_mode;
  return run_program(record_command(trace_path, command), options);
}

// moescope holds CUPTI when the program's profiler starts: the capture delivers what CUPTI
// holds for it, gives the slot back and says so; the profiler subscribes and gets its kernels.
TEST(CuptiTwoClients, TheCaptureYieldsToTheProgramsProfilerAndNamesIt) {
  TempDir dir;
  RunResult run = run_two_clients(dir / "yield.moetrace", {}, "eager");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("cuptiSubscribe_v2 -> 0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("profiler kernels: kernel_during_profiler\n"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("foreign buffers 0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("violations 0"), std::string::npos) << run.out << run.err;

  LoadedTrace loaded = load_trace(dir / "yield.moetrace");
  ASSERT_TRUE(loaded.opened);
  EXPECT_EQ(kernel_names(loaded), std::vector<std::string>{"kernel_before_profiler"});
  EXPECT_TRUE(has_note_starting(
      loaded,
      "gpu capture yielded to the program's own CUPTI client (cuptiSubscribe_v2 from "
      "cupti_two_clients_program): GPU activity from here on is not recorded; NVTX and NCCL "
      "still are"))
      << ::testing::PrintToString(loaded.instant_names());
}

// The program's profiler holds CUPTI when CUDA starts: the capture leaves it alone and the
// trace names the holder.
TEST(CuptiTwoClients, AHeldCuptiIsLeftAloneAndTheHolderNamed) {
  TempDir dir;
  RunResult run = run_two_clients(dir / "held.moetrace", {"--profiler-first"}, "lazy");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("profiler kernels: kernel_during_profiler\n"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("foreign buffers 0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("violations 0"), std::string::npos) << run.out << run.err;

  LoadedTrace loaded = load_trace(dir / "held.moetrace");
  ASSERT_TRUE(loaded.opened);
  EXPECT_TRUE(kernel_names(loaded).empty());
  EXPECT_TRUE(has_note_starting(loaded,
                                "gpu capture off: CUPTI is held by CUPTI for torch.profiler: GPU "
                                "activity not recorded (NVTX and NCCL still are)"))
      << ::testing::PrintToString(loaded.instant_names());
}

}  // namespace
}  // namespace moescope::testing
