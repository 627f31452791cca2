// HolisticTraceAnalysis (PyPI) loads our per-rank Chrome export of a 2-rank run and its
// temporal breakdown (idle / compute / non-compute over the GPU window) agrees with ours.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

TEST(HolisticTraceAnalysis, TemporalBreakdownAgreesWithOurs) {
  testing::SyntheticOptions options;
  options.num_ranks = 2;
  options.num_steps = 4;
  options.unoverlapped_a2a = true;  // non-compute time HTA must see
  options.sync_per_step = true;     // device-to-host copies and GPU idle after the sync
  options.slow_rank = 1;            // different breakdowns per rank
  std::string directory = testing::test_directory("hta");
  TraceModel model = load_traces(testing::write_synthetic_run(directory, "run", options));
  ASSERT_EQ(model.processes.size(), 2u);
  nlohmann::json expected;
  for (const ProcessTrack& process : model.processes) {
    ChromeExportOptions export_options;
    export_options.only_rank = process.rank;
    std::string path = directory + "/rank" + std::to_string(process.rank) + ".json";
    ASSERT_TRUE(export_chrome_trace(model, path, export_options).ok);
    // HTA's window: first GPU op start to last GPU op end (host syncs are not GPU work).
    TimeNs first = INT64_MAX, last = INT64_MIN;
    size_t kernels = 0;
    for (const auto& stream : process.gpu_streams) {
      for (const GpuOp& op : stream.ops) {
        if (op.kind == GpuOpKind::kSync) continue;
        first = std::min(first, op.start);
        last = std::max(last, op.end);
        ++kernels;
      }
    }
    StepBreakdown ours = breakdown_interval(model, process, first, last);
    expected[std::to_string(process.rank)] = {
        {"idle_us", ours.idle_ms * 1e3},
        {"compute_us", ours.compute_ms * 1e3},
        {"non_compute_us", (ours.exposed_communication_ms + ours.memcpy_ms) * 1e3},
        {"window_us", ours.step_ms * 1e3},
        {"kernels", kernels}};
    // The run has all three parts, so agreement means something.
    EXPECT_GT(ours.idle_ms, 0.5);
    EXPECT_GT(ours.exposed_communication_ms, 5.0);
    EXPECT_GT(ours.memcpy_ms, 0.1);
  }
  // Outside the trace directory: HTA reads every .json there.
  std::string expected_path = testing::test_directory("hta_expected") + "/expected.json";
  std::ofstream(expected_path) << expected.dump(2);
  std::string command = "python3 " + testing::helper_script("hta_breakdown_check.py") + " " +
                        directory + " " + expected_path + " > " + directory + "/hta.log 2>&1";
  int status = std::system(command.c_str());
  std::ifstream log(directory + "/hta.log");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << text;
}

}  // namespace
}  // namespace moescope::analysis
