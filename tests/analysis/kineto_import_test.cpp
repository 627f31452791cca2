// A Kineto JSON written by torch.profiler on CPU (generated here with python3 + torch) imports
// into the model and reports; so does its gzip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moescope/analysis/kineto_import.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "synthetic_moe_trace.h"

namespace moescope::analysis {
namespace {

std::string write_torch_trace(const std::string& directory) {
  std::string script = testing::helper_script("write_kineto_trace.py");
  std::string out = directory + "/torch_trace.json";
  std::string command = "python3 " + script + " " + out + " --gzip";
  int status = std::system(command.c_str());
  EXPECT_EQ(status, 0) << command;
  return out;
}

TEST(KinetoImport, TorchProfilerTraceImportsAndReports) {
  std::string directory = testing::test_directory("kineto");
  std::string path = write_torch_trace(directory);
  ASSERT_TRUE(std::filesystem::exists(path));
  TraceModel model = import_kineto_json(path);
  ASSERT_TRUE(model.errors.empty()) << model.errors[0].to_string();
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  EXPECT_EQ(process.source_format, "kineto");
  size_t spans = 0, layers = 0;
  bool nested = false;
  for (const auto& thread : process.threads) {
    spans += thread.spans.size();
    for (const Span& span : thread.spans) {
      if (model.name(span.name) == "moe.layer") ++layers;
      if (model.name(span.name) == "moe.route" && span.parent >= 0) {
        nested |= model.name(thread.spans[size_t(span.parent)].name) == "moe.layer";
      }
    }
  }
  EXPECT_GT(spans, 50u);
  EXPECT_EQ(layers, 4u);  // the 4 active steps
  EXPECT_TRUE(nested);
  // ProfilerStep#N ranges become the steps, numbered as torch numbered them.
  EXPECT_EQ(model.step_source, StepSource::kProfilerSteps);
  ASSERT_EQ(process.steps.size(), 4u);
  EXPECT_EQ(process.steps[0].step + 3, process.steps[3].step);
  EXPECT_FALSE(process.memory_events.empty());

  Report report = build_report(model);
  EXPECT_EQ(report.summary.steps, 4u);
  ASSERT_EQ(report.breakdown.ranks.size(), 1u);
  EXPECT_GT(report.breakdown.ranks[0].mean().compute_ms, 0.0);
  auto json = nlohmann::json::parse(render_report(model, report, ReportFormat::kJson));
  EXPECT_EQ(json["summary"]["ranks"], 1);

  TraceModel from_gzip = load_traces({path + ".gz"});
  ASSERT_TRUE(from_gzip.errors.empty());
  ASSERT_EQ(from_gzip.processes.size(), 1u);
  EXPECT_EQ(from_gzip.processes[0].events, process.events);
}

TEST(KinetoImport, GpuEventsLinkToTheirLaunches) {
  // A hand-written Kineto excerpt with the GPU categories torch writes on CUDA machines.
  std::string path = testing::test_directory("kineto_gpu") + "/gpu.json";
  nlohmann::json trace = {
      {"distributedInfo", {{"backend", "nccl"}, {"rank", 3}, {"world_size", 8}}},
      {"traceEvents",
       {{{"ph", "X"},
         {"cat", "cpu_op"},
         {"name", "aten::mm"},
         {"pid", 10},
         {"tid", 11},
         {"ts", 100.0},
         {"dur", 50.0}},
        {{"ph", "X"},
         {"cat", "cuda_runtime"},
         {"name", "cudaLaunchKernel"},
         {"pid", 10},
         {"tid", 11},
         {"ts", 110.5},
         {"dur", 4.25},
         {"args", {{"correlation", 77}}}},
        {{"ph", "X"},
         {"cat", "kernel"},
         {"name", "sm90_gemm"},
         {"pid", 0},
         {"tid", 7},
         {"ts", 120.0},
         {"dur", 30.001},
         {"args", {{"correlation", 77}, {"device", 0}, {"stream", 7}}}},
        {{"ph", "X"},
         {"cat", "gpu_memcpy"},
         {"name", "Memcpy DtoH (Device -> Pinned)"},
         {"pid", 0},
         {"tid", 7},
         {"ts", 151.0},
         {"dur", 2.0},
         {"args", {{"device", 0}, {"stream", 7}, {"bytes", 4096}}}},
        {{"ph", "M"},
         {"name", "thread_name"},
         {"pid", 10},
         {"tid", 11},
         {"args", {{"name", "python main"}}}}}}};
  std::ofstream(path) << trace.dump();
  TraceModel model = load_traces({path});
  ASSERT_TRUE(model.errors.empty());
  ASSERT_EQ(model.processes.size(), 1u);
  const ProcessTrack& process = model.processes[0];
  EXPECT_EQ(process.rank, 3);
  EXPECT_EQ(process.world_size, 8);
  ASSERT_EQ(process.gpu_streams.size(), 1u);
  const GpuStreamTrack& stream = process.gpu_streams[0];
  ASSERT_EQ(stream.ops.size(), 2u);
  EXPECT_EQ(stream.ops[0].duration(), 30001);
  ASSERT_NE(stream.ops[0].launch_thread, kNoIndex);
  const CpuThreadTrack& thread = process.threads[stream.ops[0].launch_thread];
  EXPECT_EQ(model.name(thread.name), "python main");
  EXPECT_EQ(thread.api_calls[stream.ops[0].launch_call].start, 110500);
  EXPECT_EQ(stream.ops[1].kind, GpuOpKind::kMemcpy);
  EXPECT_EQ(stream.ops[1].copy_kind, 2);
  EXPECT_EQ(stream.ops[1].bytes, 4096u);
}

}  // namespace
}  // namespace moescope::analysis
