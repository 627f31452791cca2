// The loaded CUPTI against the compiled one: version (cuptiGetVersion vs CUPTI_API_VERSION) and
// record layouts (each record spans at least the compiled struct), through a fake CUPTI that
// plays another version; and the stop without cuptiFinalize (exit handlers, default).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../profiler/trace_test_reading.h"
#include "cupti_capture.h"
#include "cupti_compatibility.h"
#include "cupti_fake_api.h"
#include "moescope/recorder.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;
using inject::compiled_record_size;
using inject::cupti_record_layout_refusal;
using inject::cupti_version_refusal;
using inject::cupti_versions_compatible;
using inject::CuptiCapture;
using inject::CuptiCaptureOptions;
using inject::kCompiledCuptiApiVersion;

CuptiCaptureOptions manual_flush() {
  CuptiCaptureOptions options;
  options.flush_interval_ms = 0;
  return options;
}

TEST(CuptiCompatibility, SameCudaMinorIsCompatibleOtherwiseNot) {
  EXPECT_EQ(kCompiledCuptiApiVersion, static_cast<uint32_t>(CUPTI_API_VERSION));
  EXPECT_TRUE(cupti_versions_compatible(130001, 130001));
  EXPECT_TRUE(cupti_versions_compatible(130000, 130001));  // a CUPTI update of 13.0
  EXPECT_TRUE(cupti_versions_compatible(130002, 130001));
  EXPECT_FALSE(cupti_versions_compatible(130100, 130001));  // 13.1 may carry new structs
  EXPECT_FALSE(cupti_versions_compatible(120000, 130001));
  EXPECT_FALSE(cupti_versions_compatible(26, 130001));  // CUDA 12.8's numbering
  EXPECT_TRUE(cupti_versions_compatible(26, 26));
  EXPECT_FALSE(cupti_versions_compatible(27, 26));
  EXPECT_EQ(cupti_version_refusal(26, 130001),
            "CUPTI 26 does not match the compiled 130001: GPU activity not recorded");
}

TEST(CuptiCompatibility, ARecordShorterThanItsCompiledStructIsRefused) {
  const size_t kernel_bytes = sizeof(inject::CuptiKernelRecord);
  EXPECT_EQ(compiled_record_size(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), kernel_bytes);
  EXPECT_EQ(compiled_record_size(CUPTI_ACTIVITY_KIND_MEMCPY), sizeof(inject::CuptiMemcpyRecord));
  EXPECT_EQ(compiled_record_size(CUPTI_ACTIVITY_KIND_MARKER), 0u);  // not translated
  EXPECT_TRUE(
      cupti_record_layout_refusal(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, kernel_bytes).empty());
  EXPECT_TRUE(cupti_record_layout_refusal(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, kernel_bytes + 64)
                  .empty());
  EXPECT_TRUE(cupti_record_layout_refusal(CUPTI_ACTIVITY_KIND_MARKER, 8).empty());
  std::string refusal =
      cupti_record_layout_refusal(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, kernel_bytes - 8);
  EXPECT_EQ(refusal, "CUPTI record of kind 10 spans " + std::to_string(kernel_bytes - 8) +
                         " bytes, compiled " +
                         inject::CuptiRecordName<inject::CuptiKernelRecord>::value + " is " +
                         std::to_string(kernel_bytes) + ": GPU activity not recorded");
}

TEST(CuptiCompatibility, AnotherCuptiVersionIsRefusedBeforeAnythingIsEnabled) {
  FakeCuptiApi api;
  api.version = 130100;
  CuptiCapture capture(api, manual_flush());
  std::string error;
  EXPECT_FALSE(capture.start(&error));
  EXPECT_TRUE(capture.version_refused());
  EXPECT_EQ(error, "CUPTI 130100 does not match the compiled " +
                       std::to_string(kCompiledCuptiApiVersion) + ": GPU activity not recorded");
  EXPECT_EQ(api.clock, nullptr);  // not even the timestamp callback
  EXPECT_EQ(api.requested, nullptr);
  EXPECT_TRUE(api.enabled.empty());
  EXPECT_FALSE(capture.running());

  api.version = kCompiledCuptiApiVersion / 100 * 100 + 99;  // another update of the same CUDA
  EXPECT_TRUE(capture.start(&error)) << error;
  EXPECT_FALSE(capture.version_refused());
  capture.stop();
}

TEST(CuptiCompatibility, AnyVersionCanBeAcceptedOnRequest) {
  FakeCuptiApi api;
  api.version = 26;
  CuptiCaptureOptions options = manual_flush();
  options.accept_any_version = true;
  CuptiCapture capture(api, options);
  std::string error;
  EXPECT_TRUE(capture.start(&error)) << error;
  capture.stop();
}

TEST(CuptiCompatibility, ARecordOfAnotherLayoutStopsTranslationAndTheTraceSaysWhy) {
  std::string path = temp_path("cupti_layout.moetrace");
  ASSERT_EQ(moescope_recorder_start(path.c_str(), nullptr), 0);
  FakeCuptiApi api;
  CuptiCapture capture(api, manual_flush());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  ASSERT_TRUE(api.deliver(fake_kernel_record(1),
                          fake_kernel_record(2)));  // the compiled layout: translated
  EXPECT_EQ(capture.counts().kernels, 2u);
  // A CUPTI whose kernel record is 16 bytes shorter: neither it nor anything later is read.
  const size_t short_extent = sizeof(inject::CuptiKernelRecord) - 16;
  ASSERT_TRUE(api.deliver_shortened(fake_kernel_record(3), short_extent, fake_kernel_record(4)));
  ASSERT_TRUE(api.deliver(fake_kernel_record(5)));
  EXPECT_EQ(capture.counts().kernels, 2u);
  EXPECT_EQ(capture.refused_records(), 3u);
  EXPECT_EQ(capture.pool().buffers_in_use(), 0u);  // refused buffers still go back
  capture.stop();
  moescope_recorder_stop();

  LoadedTrace loaded = load_trace(path);
  EXPECT_EQ(loaded.of_kind(trace::RecordKind::kGpuKernel).size(), 2u);
  const std::string note =
      "gpu capture off: " +
      cupti_record_layout_refusal(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, short_extent);
  std::vector<std::string> notes = loaded.instant_names();
  EXPECT_EQ(std::count(notes.begin(), notes.end(), note), 1) << "once, not per record";
  std::remove(path.c_str());
}

TEST(CuptiCompatibility, TheLastRecordOfABufferIsCheckedAgainstTheValidBytes) {
  FakeCuptiApi api;
  CuptiCapture capture(api, manual_flush());
  std::string error;
  ASSERT_TRUE(capture.start(&error)) << error;
  // Only the record's first 24 bytes are valid: CUPTI of a smaller struct, or a torn buffer.
  ASSERT_TRUE(api.deliver_truncated(fake_kernel_record(7), 24));
  EXPECT_EQ(capture.counts().kernels, 0u);
  EXPECT_EQ(capture.refused_records(), 1u);
  capture.stop();
}

// The default stop (no finalize) is in cupti_capture_test.cpp.
TEST(CuptiCompatibility, FinalizeOnlyWhenAskedForAndNeverAtExit) {
  std::string error;
  CuptiCaptureOptions finalizing = manual_flush();
  finalizing.finalize_at_stop = true;  // MOESCOPE_CUPTI_FINALIZE=1
  FakeCuptiApi exit_api;
  CuptiCapture at_exit(exit_api, finalizing);
  ASSERT_TRUE(at_exit.start(&error)) << error;
  at_exit.stop_at_exit();
  EXPECT_EQ(exit_api.finalize_calls, 0);
  EXPECT_EQ(exit_api.flush_flags.back(), static_cast<uint32_t>(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  EXPECT_EQ(exit_api.disabled, exit_api.enabled);
  at_exit.stop();  // already stopped: nothing more
  EXPECT_EQ(exit_api.finalize_calls, 0);

  FakeCuptiApi asked_api;
  CuptiCapture asked(asked_api, finalizing);
  ASSERT_TRUE(asked.start(&error)) << error;
  asked.stop();
  EXPECT_EQ(asked_api.finalize_calls, 1);
}

}  // namespace
}  // namespace moescope::testing
