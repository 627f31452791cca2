// The process-level GPU capture switch (cupti_injection.cpp) on a machine without a GPU: what it
// decides from the environment, what it tells the trace, and the real libcupti.so.13 loaded
// through the dlopen vendor layer (it loads without a driver; starting fails with
// CUPTI_ERROR_UNKNOWN, which must leave CUPTI off with a clear reason).
// The state is per process: each test stops what it started, and a start after a stop decides
// afresh, so the tests pass in any order and repeated (--gtest_shuffle --gtest_repeat).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include <cupti_runtime_cbid.h>
#include <cupti_version.h>
#include "../profiler/trace_test_reading.h"

#include <algorithm>

#include "cupti_api.h"
#include "cupti_compatibility.h"
#include "cupti_injection.h"
#include "moescope/recorder.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;
using inject::gpu_capture_metadata_json;
using inject::gpu_capture_start;
using inject::gpu_capture_state;
using inject::gpu_capture_stop;

// A library every machine has, standing in for libcuda.so.1 ("a driver is installed").
constexpr const char* kLoadableStandInForTheDriver = "libz.so.1";

bool contains(const std::vector<std::string>& texts, const std::string& text) {
  return std::find(texts.begin(), texts.end(), text) != texts.end();
}

class GpuCaptureSwitch : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"MOESCOPE_CUPTI", "MOESCOPE_CUDA", "MOESCOPE_CUPTI_PATH",
                             "CUDA_INJECTION64_PATH", "MOESCOPE_CUDA_DRIVER_LIBRARY"}) {
      unsetenv(name);
    }
    inject::gpu_capture_forget_cuda_init_for_tests();  // each test: a fresh process
    path_ = temp_path("gpu_switch.moetrace");
    ASSERT_EQ(moescope_recorder_start(path_.c_str(), nullptr), 0);
  }
  void TearDown() override {
    gpu_capture_stop();
    moescope_recorder_stop();
    std::remove(path_.c_str());
  }
  LoadedTrace finish() {
    gpu_capture_stop();
    moescope_recorder_stop();
    return load_trace(path_);
  }
  std::string path_;
};

TEST_F(GpuCaptureSwitch, WithoutADriverNothingIsEnabledAndTheTraceSaysWhy) {
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "no CUDA driver");
  EXPECT_NE(gpu_capture_metadata_json().find("\"cupti\":\"no CUDA driver\""), std::string::npos)
      << gpu_capture_metadata_json();
  LoadedTrace loaded = finish();
  EXPECT_TRUE(
      contains(loaded.instant_names(), "gpu capture off: no CUDA driver (libcuda.so.1 not found)"));
}

TEST_F(GpuCaptureSwitch, OffMeansOff) {
  setenv("MOESCOPE_CUPTI", "off", 1);
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "off");
  InitializeInjection();  // a driver calling in anyway changes nothing
  EXPECT_EQ(gpu_capture_state(), "off");
}

TEST_F(GpuCaptureSwitch, WithCudaInjectionPathCuptiWaitsForCuInit) {
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  setenv("CUDA_INJECTION64_PATH", "/path/to/libmoescope_inject.so", 1);
  setenv("MOESCOPE_CUPTI_PATH", "/nonexistent/libcupti.so.13", 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "waiting for cuInit");
  EXPECT_EQ(InitializeInjection(), 1);  // what the CUDA driver calls at cuInit
  EXPECT_EQ(gpu_capture_state(), "failed");
  EXPECT_NE(gpu_capture_metadata_json().find("/nonexistent/libcupti.so.13"), std::string::npos)
      << gpu_capture_metadata_json();
  LoadedTrace loaded = finish();
  EXPECT_TRUE(contains(loaded.instant_names(), "gpu capture off: libcupti not found"));
}

// cuInit happens once per process: a recording started after it (the program stopped and
// started recording, or a session restarted) must start CUPTI at once, not wait for a cuInit
// that never comes again (before the fix the second trace had no GPU activity at all).
TEST_F(GpuCaptureSwitch, ARecordingAfterCuInitStartsCuptiAtOnce) {
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  setenv("CUDA_INJECTION64_PATH", "/path/to/libmoescope_inject.so", 1);
  setenv("MOESCOPE_CUPTI_PATH", "/nonexistent/libcupti.so.13", 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "waiting for cuInit");
  InitializeInjection();                     // the driver, at the program's cuInit
  EXPECT_EQ(gpu_capture_state(), "failed");  // tried: CUPTI is not found here
  finish();

  ASSERT_EQ(moescope_recorder_start(path_.c_str(), nullptr), 0);
  gpu_capture_start();  // the second recording: no cuInit will come
  EXPECT_EQ(gpu_capture_state(), "failed") << gpu_capture_metadata_json();
  LoadedTrace loaded = finish();
  EXPECT_TRUE(contains(loaded.instant_names(), "gpu capture off: libcupti not found"));
}

TEST_F(GpuCaptureSwitch, TheRealCuptiLoadsButCannotEnableWithoutAGpu) {
  std::string error;
  auto api = inject::DlopenCuptiApi::load(&error);
  if (!api) GTEST_SKIP() << "no libcupti.so.13 on this machine: " << error;
  EXPECT_EQ(api->error_text(CUPTI_ERROR_UNKNOWN), "CUPTI_ERROR_UNKNOWN");
  // The toolkit's libcupti reports the version of the headers the shim was built with.
  uint32_t version = 0;
  ASSERT_EQ(api->get_version(&version), CUPTI_SUCCESS);
  EXPECT_TRUE(inject::cupti_versions_compatible(version, inject::kCompiledCuptiApiVersion))
      << "loaded " << api->library_path() << " reports " << version;
  EXPECT_NE(api->callback_name(CUPTI_CB_DOMAIN_RUNTIME_API,
                               CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000),
            nullptr);

  setenv("MOESCOPE_CUPTI", "eager", 1);
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "failed");
  std::string metadata = gpu_capture_metadata_json();
  // Without a driver CUPTI refuses the first call already (the timestamp callback).
  EXPECT_NE(metadata.find("CUPTI_ERROR_UNKNOWN"), std::string::npos) << metadata;
  LoadedTrace loaded = finish();
  EXPECT_TRUE(contains(loaded.instant_names(), "gpu capture off: CUPTI could not be enabled"));
}

#ifdef MOESCOPE_TEST_OLDER_CUPTI
// A real libcupti of CUDA 12 (Triton's wheel carries one): its records have other layouts, so
// the shim refuses it by version, says which versions in the trace, and enables nothing.
TEST_F(GpuCaptureSwitch, AnotherVersionOfTheRealCuptiIsRefusedWithBothVersionsInTheTrace) {
  setenv("MOESCOPE_CUPTI", "eager", 1);
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  setenv("MOESCOPE_CUPTI_PATH", MOESCOPE_TEST_OLDER_CUPTI, 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "failed");
  const std::string suffix = " does not match the compiled " + std::to_string(CUPTI_API_VERSION) +
                             ": GPU activity not recorded";
  std::string metadata = gpu_capture_metadata_json();
  EXPECT_NE(metadata.find(suffix), std::string::npos) << metadata;
  LoadedTrace loaded = finish();
  std::vector<std::string> notes = loaded.instant_names();
  auto refusal = std::find_if(notes.begin(), notes.end(), [&](const std::string& note) {
    return note.rfind("gpu capture off: CUPTI ", 0) == 0 && note.size() > suffix.size() &&
           note.compare(note.size() - suffix.size(), suffix.size(), suffix) == 0;
  });
  ASSERT_NE(refusal, notes.end()) << "no version refusal among " << notes.size() << " notes";
  EXPECT_EQ(refusal->find("CUPTI 13"), std::string::npos) << *refusal;  // CUDA 12's numbering
}
#endif

// A program may record, stop and record again: the second start must look for CUPTI as a
// fresh process would, not reuse what the first start loaded.
TEST_F(GpuCaptureSwitch, AStartAfterAStopLooksForCuptiAgain) {
  std::string error;
  if (!inject::DlopenCuptiApi::load(&error)) {
    GTEST_SKIP() << "no libcupti.so.13 on this machine: " << error;
  }
  setenv("MOESCOPE_CUPTI", "eager", 1);
  setenv("MOESCOPE_CUDA_DRIVER_LIBRARY", kLoadableStandInForTheDriver, 1);
  gpu_capture_start();  // loads the real CUPTI
  // It cannot enable without a GPU ("failed"), and runs with one ("on"): found either way.
  std::string first_state = gpu_capture_state();
  EXPECT_TRUE(first_state == "failed" || first_state == "on") << gpu_capture_metadata_json();
  finish();

  ASSERT_EQ(moescope_recorder_start(path_.c_str(), nullptr), 0);
  setenv("MOESCOPE_CUPTI_PATH", "/nonexistent/libcupti.so.13", 1);
  gpu_capture_start();
  EXPECT_EQ(gpu_capture_state(), "failed");
  EXPECT_NE(gpu_capture_metadata_json().find("/nonexistent/libcupti.so.13"), std::string::npos)
      << gpu_capture_metadata_json();
  LoadedTrace loaded = finish();
  EXPECT_TRUE(contains(loaded.instant_names(), "gpu capture off: libcupti not found"));
}

}  // namespace
}  // namespace moescope::testing
