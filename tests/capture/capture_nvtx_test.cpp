// samples/nvtx_ranges under `moescope record`: every NVTX range is in the trace with the right
// nesting, thread, domain and name, and `moescope info --json` counts them.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "capture_test_support.h"

namespace moescope::testing {
namespace {

using trace::RecordKind;

std::string nvtx_sample() {
  return build_dir() + "/bin/nvtx_ranges";
}

TEST(CaptureNvtx, SampleRangesAreRecordedWithNestingThreadAndDomain) {
  TempDir dir;
  std::string pattern = dir / "nvtx.moetrace";
  RunResult plain = run_program({nvtx_sample(), "--steps", "4"});
  RunResult recorded = run_program(record_command(pattern, {nvtx_sample(), "--steps", "4"}));
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_EQ(recorded.out, plain.out);  // the program's output is untouched
  EXPECT_NE(recorded.err.find(pattern), std::string::npos) << recorded.err;

  LoadedTrace trace = load_trace(pattern);
  ASSERT_TRUE(trace.opened);
  EXPECT_TRUE(trace.complete);
  EXPECT_TRUE(trace.errors.empty());

  auto threads = thread_names(trace);
  std::vector<RebuiltSpan> spans = rebuild_spans(trace);
  ASSERT_EQ(spans.size(), 4u * 3 + 4u * 2);
  uint32_t trainer_stream = 0, loader_stream = 0;
  std::map<std::string, int> count;
  for (const auto& span : spans) {
    EXPECT_TRUE(span.closed) << span.name;
    ++count[span.name];
    if (span.name == "step") {
      EXPECT_EQ(span.depth, 0);
      EXPECT_EQ(span.domain, "");
      trainer_stream = span.stream;
    } else if (span.name == "forward" || span.name == "backward") {
      EXPECT_EQ(span.depth, 1);
      EXPECT_EQ(span.parent, "step");
      EXPECT_EQ(span.domain, "");
    } else if (span.name == "load_batch") {  // a registered string
      EXPECT_EQ(span.depth, 0);
      EXPECT_EQ(span.domain, "sample.io");
      loader_stream = span.stream;
    } else if (span.name == "decode") {
      EXPECT_EQ(span.depth, 1);
      EXPECT_EQ(span.parent, "load_batch");
      EXPECT_EQ(span.domain, "sample.io");
    } else {
      ADD_FAILURE() << "unexpected span " << span.name;
    }
  }
  EXPECT_EQ(count["step"], 4);
  EXPECT_EQ(count["forward"], 4);
  EXPECT_EQ(count["backward"], 4);
  EXPECT_EQ(count["load_batch"], 4);
  EXPECT_EQ(count["decode"], 4);
  // Each thread's spans are on its own stream, named by nvtxNameOsThread.
  ASSERT_NE(trainer_stream, loader_stream);
  EXPECT_EQ(threads[trainer_stream], "trainer");
  EXPECT_EQ(threads[loader_stream], "loader");
  for (const auto& span : spans) {
    bool trainer_span = span.name == "step" || span.name == "forward" || span.name == "backward";
    EXPECT_EQ(span.stream, trainer_span ? trainer_stream : loader_stream) << span.name;
  }

  // NVTX marks are instants of the NVTX domain; the shim's own notes (e.g. "no CUDA driver")
  // are in the "moescope" domain.
  std::vector<OwnedRecord> marks;
  for (const auto& instant : trace.of_kind(RecordKind::kInstant)) {
    if (name_of(trace, instant.as<trace::InstantRecord>().domain) != "moescope") {
      marks.push_back(instant);
    }
  }
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(name_of(trace, marks[0].header().name), "done");
  EXPECT_EQ(marks[0].stream, trainer_stream);
  auto starts = trace.of_kind(RecordKind::kRangeStart);
  auto ends = trace.of_kind(RecordKind::kRangeEnd);
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(name_of(trace, starts[0].header().name), "epoch");
  EXPECT_EQ(starts[0].as<trace::RangeStartRecord>().range_id,
            ends[0].as<trace::RangeEndRecord>().range_id);
  EXPECT_LE(starts[0].header().time, ends[0].header().time);

  RunResult info = run_program({moescope_binary(), "info", "--json", pattern});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  auto json = nlohmann::json::parse(info.out);
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json[0]["events_per_kind"]["span_begin"], 20);
  EXPECT_EQ(json[0]["events_per_kind"]["span_end"], 20);
  EXPECT_EQ(json[0]["events_per_kind"]["instant"], trace.of_kind(RecordKind::kInstant).size());
  EXPECT_EQ(json[0]["events_per_kind"]["range_start"], 1);
  EXPECT_EQ(json[0]["events_per_kind"]["range_end"], 1);
  EXPECT_EQ(json[0]["complete"], true);
  EXPECT_EQ(json[0]["metadata"]["capture"]["tool"], "moescope record");
}

TEST(CaptureNvtx, CategoriesTheNcclDomainWideStringsAndDomainMarksAreRecorded) {
  TempDir dir;
  std::string pattern = dir / "kinds.moetrace";
  RunResult recorded =
      run_program(record_command(pattern, {build_dir() + "/tests/capture_nvtx_kinds_program"}));
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_EQ(recorded.out, "nvtx kinds done\n");
  LoadedTrace trace = load_trace(pattern);
  ASSERT_TRUE(trace.complete);

  std::map<std::string, RebuiltSpan> spans;
  for (const auto& span : rebuild_spans(trace)) {
    EXPECT_TRUE(span.closed) << span.name;
    EXPECT_TRUE(spans.emplace(span.name, span).second) << "twice: " << span.name;
  }
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_EQ(spans["read"].domain, "io");  // a named category of the default domain
  EXPECT_EQ(spans["allreduce"].domain, "NCCL/coll");
  EXPECT_EQ(spans["init"].domain, "NCCL");
  EXPECT_EQ(spans["init"].parent, "allreduce");
  EXPECT_EQ(spans["vorw\u00e4rts"].domain, "");  // UTF-32 in, UTF-8 in the trace
  EXPECT_EQ(spans["gr\u00f6\u00dfe"].domain, "");

  std::map<std::string, std::string> domain_of_mark;
  for (const auto& instant : trace.of_kind(RecordKind::kInstant)) {
    std::string domain = name_of(trace, instant.as<trace::InstantRecord>().domain);
    if (domain != "moescope") domain_of_mark[name_of(trace, instant.header().name)] = domain;
  }
  EXPECT_EQ(domain_of_mark,
            (std::map<std::string, std::string>{{"fertig \u2713", ""}, {"proxy", "NCCL"}}));
  auto starts = trace.of_kind(RecordKind::kRangeStart);
  auto ends = trace.of_kind(RecordKind::kRangeEnd);
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(name_of(trace, starts[0].header().name), "comm_init");
  EXPECT_EQ(name_of(trace, starts[0].as<trace::RangeStartRecord>().domain), "NCCL");
  EXPECT_EQ(starts[0].as<trace::RangeStartRecord>().range_id,
            ends[0].as<trace::RangeEndRecord>().range_id);
}

TEST(CaptureNvtx, NoCudaNoNcclAreWrittenToTheMetadataAndHonoured) {
  TempDir dir;
  RunResult recorded = run_program(
      record_command(dir / "nvtx.moetrace", {nvtx_sample()}, {"--no-cuda", "--no-nccl"}));
  ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
  LoadedTrace trace = load_trace(dir / "nvtx.moetrace");
  auto metadata = nlohmann::json::parse(trace.metadata_json);
  EXPECT_EQ(metadata["capture"]["cuda"], false);
  EXPECT_EQ(metadata["capture"]["nccl"], false);
  // The GPU capture never started: none of its notes ("moescope" domain), NVTX still recorded.
  for (const auto& instant : trace.of_kind(RecordKind::kInstant)) {
    EXPECT_NE(name_of(trace, instant.as<trace::InstantRecord>().domain), "moescope")
        << name_of(trace, instant.header().name);
  }
  EXPECT_EQ(trace.of_kind(RecordKind::kSpanBegin).size(), 15u);
  EXPECT_EQ(metadata["capture"]["gpu"]["cupti"], "off");
  EXPECT_NE(metadata["capture"]["gpu"]["cupti_detail"].get<std::string>().find("--no-cuda"),
            std::string::npos)
      << metadata.dump();
}

// What `moescope info` shows for a trace of a run on a machine without a CUDA driver.
struct GpuCaptureExplained {
  nlohmann::json gpu;           // metadata.capture.gpu of `moescope info --json`
  std::string info_text;        // `moescope info`
  bool no_driver_note = false;  // the shim's instant "gpu capture off: no CUDA driver (...)"
};

GpuCaptureExplained record_and_explain(const TempDir& dir, const RunOptions& options) {
  GpuCaptureExplained explained;
  std::string pattern = dir / "nvtx.moetrace";
  RunResult recorded = run_program(record_command(pattern, {nvtx_sample()}), options);
  EXPECT_EQ(recorded.exit_code, 0) << recorded.err;
  RunResult json = run_program({moescope_binary(), "info", "--json", pattern});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  explained.gpu = nlohmann::json::parse(json.out)[0]["metadata"]["capture"]["gpu"];
  RunResult text = run_program({moescope_binary(), "info", pattern});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  explained.info_text = text.out;
  LoadedTrace trace = load_trace(pattern);
  for (const auto& instant : trace.of_kind(RecordKind::kInstant)) {
    explained.no_driver_note |= name_of(trace, instant.header().name) ==
                                "gpu capture off: no CUDA driver (libcuda.so.1 not found)";
  }
  return explained;
}

TEST(CaptureNvtx, WithoutACudaDriverTheTraceSaysWhyThereIsNoGpuActivity) {
  TempDir dir;
  RunOptions options;
  // A driver library that cannot exist, so the run is the same on a GPU machine.
  options.environment = {{"MOESCOPE_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1"}};
  GpuCaptureExplained explained = record_and_explain(dir, options);
#ifdef MOESCOPE_TEST_HAVE_GPU_CAPTURE
  EXPECT_EQ(explained.gpu["cupti"], "no CUDA driver") << explained.gpu.dump();
  EXPECT_EQ(explained.gpu["cupti_detail"], "/nonexistent/libcuda.so.1 not found");
  EXPECT_NE(explained.info_text.find(
                "gpu       CUPTI no CUDA driver: /nonexistent/libcuda.so.1 not found"),
            std::string::npos)
      << explained.info_text;
  EXPECT_TRUE(explained.no_driver_note);
#else
  EXPECT_EQ(explained.gpu["cupti"], "off") << explained.gpu.dump();
  EXPECT_NE(explained.info_text.find("built without the CUPTI headers"), std::string::npos)
      << explained.info_text;
#endif
}

TEST(CaptureNvtx, TheMachinesOwnDriverDecidesWhatTheMetadataSays) {
  // Nothing overridden: what the shim finds on this machine (CPU machines: no libcuda.so.1).
  TempDir dir;
  RunOptions options;
  options.unset_environment = {"MOESCOPE_CUDA_DRIVER_LIBRARY", "MOESCOPE_CUPTI"};
  GpuCaptureExplained explained = record_and_explain(dir, options);
#ifdef MOESCOPE_TEST_HAVE_GPU_CAPTURE
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) {
    EXPECT_EQ(explained.gpu["cupti"], "no CUDA driver") << explained.gpu.dump();
    EXPECT_EQ(explained.gpu["cupti_detail"], "libcuda.so.1 not found");
    EXPECT_TRUE(explained.no_driver_note);
  } else {
    // `moescope record` points CUDA_INJECTION64_PATH at the shim: CUPTI waits for cuInit.
    EXPECT_EQ(explained.gpu["cupti"], "waiting for cuInit") << explained.gpu.dump();
    EXPECT_FALSE(explained.no_driver_note);
  }
#else
  EXPECT_EQ(explained.gpu["cupti"], "off") << explained.gpu.dump();
#endif
  EXPECT_NE(explained.info_text.find("gpu       CUPTI "), std::string::npos) << explained.info_text;
}

TEST(CaptureNvtx, WithoutRecordTheShimStaysIdle) {
  // Preloaded without MOESCOPE_OUTPUT (e.g. by the Python module's search): no file, same run.
  TempDir dir;
  std::string library = build_dir() + "/lib/libmoescope_inject.so";
  RunOptions options;
  options.environment = {{"LD_PRELOAD", library}, {"NVTX_INJECTION64_PATH", library}};
  options.unset_environment = {"MOESCOPE_OUTPUT"};
  RunResult plain = run_program({nvtx_sample()});
  RunResult preloaded =
      run_program({"sh", "-c", "cd " + dir.path() + " && " + nvtx_sample()}, options);
  EXPECT_EQ(preloaded.exit_code, 0);
  EXPECT_EQ(preloaded.out, plain.out);
  EXPECT_EQ(preloaded.err, "");
  EXPECT_TRUE(dir.files("").empty());
}

TEST(CaptureNvtx, RecordReportsBadUsageAndMissingCommands) {
  RunResult no_command = run_program({moescope_binary(), "record", "-o", "/tmp/x.moetrace"});
  EXPECT_NE(no_command.exit_code, 0);
  EXPECT_NE(no_command.err.find("no command given"), std::string::npos) << no_command.err;
  TempDir dir;
  RunResult missing =
      run_program(record_command(dir / "x.moetrace", {dir / "no_such_program", "arg"}));
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("cannot run"), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("no_such_program"), std::string::npos) << missing.err;
  RunResult bad_fork =
      run_program(record_command(dir / "x.moetrace", {"true"}, {"--fork", "sometimes"}));
  EXPECT_NE(bad_fork.exit_code, 0);
  EXPECT_NE(bad_fork.err.find("--fork"), std::string::npos) << bad_fork.err;
}

}  // namespace
}  // namespace moescope::testing
