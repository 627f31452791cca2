// CuptiCapture against a fake CUPTI: what it enables and in which order, how buffers flow and
// are recycled under a cap, how dropped records reach the trace, how it flushes and stops.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../profiler/trace_test_reading.h"
#include "cupti_buffer_pool.h"
#include "cupti_capture.h"
#include "cupti_fake_api.h"
#include "moescope/recorder.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;
using inject::CuptiBufferPool;
using inject::CuptiCapture;
using inject::CuptiCaptureOptions;

CuptiCaptureOptions quiet_options() {
  CuptiCaptureOptions options;
  options.flush_interval_ms = 0;  // flushed by hand
  return options;
}

bool contains(const std::vector<CUpti_ActivityKind>& kinds, CUpti_ActivityKind kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

TEST(CuptiCapture, StartUsesTheRecorderClockAndEnablesTheKinds) {
  FakeCuptiApi api;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  ASSERT_NE(api.clock, nullptr);
  uint64_t before = moescope_now_ns();
  uint64_t cupti_time = api.clock();
  uint64_t after = moescope_now_ns();
  EXPECT_GE(cupti_time, before);
  EXPECT_LE(cupti_time, after);
  for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                  CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_MEMORY2,
                                  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_RUNTIME,
                                  CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_CONTEXT}) {
    EXPECT_TRUE(contains(api.enabled, kind)) << "kind " << kind;
  }
  // KERNEL serializes kernels and excludes CONCURRENT_KERNEL.
  EXPECT_FALSE(contains(api.enabled, CUPTI_ACTIVITY_KIND_KERNEL));
  EXPECT_TRUE(capture.running());
  capture.stop();
}

TEST(CuptiCapture, KernelKindFailureLeavesCuptiOffWithAClearError) {
  FakeCuptiApi api;
  api.failing_kinds = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
  CuptiCapture capture(api, quiet_options());
  std::string error;
  EXPECT_FALSE(capture.start(&error));
  EXPECT_NE(error.find("CONCURRENT_KERNEL"), std::string::npos) << error;
  EXPECT_NE(error.find("FAKE_CUPTI_ERROR_999"), std::string::npos) << error;
  EXPECT_TRUE(api.enabled.empty());
  EXPECT_FALSE(capture.running());
  // The slot is free again: another capture may start.
  FakeCuptiApi other_api;
  CuptiCapture other(other_api, quiet_options());
  EXPECT_TRUE(other.start(&error)) << error;
}

TEST(CuptiCapture, OptionalKindFailureIsSkipped) {
  FakeCuptiApi api;
  api.failing_kinds = {CUPTI_ACTIVITY_KIND_MEMORY2};
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  EXPECT_FALSE(contains(capture.enabled_kinds(), CUPTI_ACTIVITY_KIND_MEMORY2));
  EXPECT_TRUE(contains(capture.enabled_kinds(), CUPTI_ACTIVITY_KIND_MEMCPY));
}

// CUPTI 13.0 serves one subscriber per process. The capture takes the slot under its name and
// gives it back at stop, so the program's own profiler can subscribe afterwards.
TEST(CuptiCapture, StartSubscribesAsMoescopeAndStopGivesTheSlotBack) {
  FakeCuptiApi api;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  EXPECT_TRUE(api.subscribed);
  EXPECT_EQ(api.subscriber_name, "moescope");
  capture.stop();
  EXPECT_FALSE(api.subscribed);
}

// When the program's profiler (torch.profiler's Kineto, Nsight) holds CUPTI, the capture says
// who and leaves CUPTI alone: no callbacks registered (they are process-wide: they would take
// the holder's buffers), nothing enabled.
TEST(CuptiCapture, AnotherSubscriberIsNamedAndLeftAlone) {
  FakeCuptiApi api;
  api.slot_taken = true;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  EXPECT_FALSE(capture.start(&error));
  EXPECT_EQ(error,
            "CUPTI is held by CUPTI for torch: GPU activity not recorded (NVTX and NCCL "
            "still are)");
  EXPECT_EQ(capture.held_by(), "CUPTI for torch");
  EXPECT_EQ(api.requested, nullptr);
  EXPECT_EQ(api.completed, nullptr);
  EXPECT_TRUE(api.enabled.empty());
  EXPECT_FALSE(capture.running());
  api.slot_taken = false;  // the holder is gone: the next start works
  EXPECT_TRUE(capture.start(&error)) << error;
  EXPECT_EQ(capture.held_by(), "");
  capture.stop();
}

TEST(CuptiCapture, OnlyOneCaptureIsActive) {
  FakeCuptiApi api;
  CuptiCapture first(api, quiet_options());
  CuptiCapture second(api, quiet_options());
  std::string error;
  ASSERT_TRUE(first.start(&error));
  EXPECT_FALSE(second.start(&error));
  EXPECT_NE(error.find("already active"), std::string::npos);
}

TEST(CuptiCapture, DeliveredBuffersReachTheTraceAndBuffersAreRecycled) {
  std::string path = temp_path("capture_flow.moetrace");
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  FakeCuptiApi api;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(api.deliver(fake_kernel_record(10 + 2 * i), fake_kernel_record(11 + 2 * i)));
  }
  EXPECT_EQ(capture.counts().kernels, 6u);
  EXPECT_EQ(capture.pool().allocated_buffers(), 1u);  // the same buffer went round three times
  EXPECT_EQ(capture.pool().buffers_in_use(), 0u);
  capture.stop();
  moescope_recorder_stop();

  LoadedTrace loaded = load_trace(path);
  auto kernels = loaded.of_kind(trace::RecordKind::kGpuKernel);
  ASSERT_EQ(kernels.size(), 6u);
  std::vector<uint32_t> correlations;
  for (const auto& kernel : kernels) {
    correlations.push_back(kernel.as<trace::GpuKernelRecord>().correlation_id);
  }
  EXPECT_EQ(correlations, (std::vector<uint32_t>{10, 11, 12, 13, 14, 15}));
  std::remove(path.c_str());
}

TEST(CuptiCapture, DroppedRecordsAreCountedInTheTrace) {
  std::string path = temp_path("capture_dropped.moetrace");
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  FakeCuptiApi api;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  api.dropped_to_report = 17;
  ASSERT_TRUE(api.deliver(fake_kernel_record(1)));
  EXPECT_EQ(capture.dropped_records(), 17u);
  api.dropped_to_report = 3;
  capture.flush(false);
  EXPECT_EQ(capture.dropped_records(), 20u);
  capture.stop();
  moescope_recorder_stop();

  LoadedTrace loaded = load_trace(path);
  auto stats = loaded.of_kind(trace::RecordKind::kStats);
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.back().as<trace::StatsRecord>().dropped_gpu_records, 20u);
  std::remove(path.c_str());
}

TEST(CuptiCapture, ThePoolCapRefusesBuffersUntilOneComesBack) {
  FakeCuptiApi api;
  CuptiCaptureOptions options = quiet_options();
  options.buffer_bytes = 4096;
  options.max_buffer_pool_bytes = 2 * 4096;
  CuptiCapture capture(api, options);
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  uint8_t* buffers[3] = {};
  size_t size = 0, max_records = 0;
  for (auto& buffer : buffers) api.requested(&buffer, &size, &max_records);
  EXPECT_NE(buffers[0], nullptr);
  EXPECT_NE(buffers[1], nullptr);
  EXPECT_EQ(buffers[2], nullptr);  // CUPTI drops (and counts) records instead
  EXPECT_EQ(capture.pool().refused_requests(), 1u);
  api.completed(nullptr, 0, buffers[0], 4096, 0);
  uint8_t* again = nullptr;
  api.requested(&again, &size, &max_records);
  EXPECT_EQ(again, buffers[0]);
  EXPECT_EQ(size, 4096u);
  EXPECT_EQ(capture.pool().allocated_buffers(), 2u);
  // Hand everything back, as CUPTI does at the final flush (the pool frees idle buffers).
  api.completed(nullptr, 0, again, 4096, 0);
  api.completed(nullptr, 0, buffers[1], 4096, 0);
  EXPECT_EQ(capture.pool().buffers_in_use(), 0u);
}

TEST(CuptiCapture, StopFlushesForcedAndDisablesOnce) {
  FakeCuptiApi api;
  CuptiCapture capture(api, quiet_options());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  capture.stop();
  ASSERT_FALSE(api.flush_flags.empty());
  EXPECT_EQ(api.flush_flags.back(), static_cast<uint32_t>(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  EXPECT_EQ(api.disabled, api.enabled);
  EXPECT_FALSE(capture.running());
  const size_t flushes = api.flush_flags.size();
  capture.stop();
  EXPECT_EQ(api.flush_flags.size(), flushes);
  EXPECT_EQ(api.disabled.size(), api.enabled.size());
}

TEST(CuptiCapture, FlushThreadFlushesPeriodically) {
  FakeCuptiApi api;
  CuptiCaptureOptions options;
  options.flush_interval_ms = 5;
  CuptiCapture capture(api, options);
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (api.flushes_with(0) < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  capture.stop();
  EXPECT_GE(api.flushes_with(0), 3u);
}

TEST(CuptiBufferPool, IgnoresUnknownAndDoubleReleases) {
  CuptiBufferPool pool(1000, 4096 * 3);
  EXPECT_EQ(pool.buffer_bytes(), 4096u);  // rounded up to the alignment
  EXPECT_EQ(pool.max_buffers(), 3u);
  uint8_t* buffer = pool.acquire();
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer) % 8, 0u);
  uint8_t unrelated[16];
  pool.release(unrelated);
  pool.release(buffer);
  pool.release(buffer);
  EXPECT_EQ(pool.buffers_in_use(), 0u);
  EXPECT_EQ(pool.acquire(), buffer);
  uint8_t* second = pool.acquire();
  EXPECT_NE(second, buffer);  // the idle list held it once, not twice
  pool.release(buffer);
  pool.release(second);
}

}  // namespace
}  // namespace moescope::testing
