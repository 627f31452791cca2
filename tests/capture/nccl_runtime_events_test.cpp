// CudaRuntimeEvents against the real CUDA runtime (libcudart.so.13, linked into this test) on a
// machine without a GPU: every function the NCCL timing needs must resolve by name (a wrong
// name would silently cost all GPU completion times on a real GPU), and without a device every
// call must fail softly so ops are recorded without GPU times.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "nccl_completion_tracker.h"
#include "nccl_gpu_events.h"

namespace moescope::testing {
namespace {

using inject::CudaRuntimeEvents;
using inject::NcclCompletionTracker;
using inject::NcclOpRecord;

TEST(CudaRuntimeEvents, ResolvesEveryFunctionFromTheLoadedRuntime) {
  // A direct call keeps libcudart linked (and loaded, as in any CUDA program).
  int runtime_version = 0;
  ASSERT_EQ(cudaRuntimeGetVersion(&runtime_version), cudaSuccess);
  EXPECT_GE(runtime_version, 12000);
  CudaRuntimeEvents events;
  EXPECT_TRUE(events.usable());
}

TEST(CudaRuntimeEvents, WithoutAGpuEverythingFailsSoftly) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    GTEST_SKIP() << "a GPU is present: tests/device/capture_run.sh covers this machine";
  }
  CudaRuntimeEvents events;
  ASSERT_TRUE(events.usable());
  EXPECT_EQ(events.current_device(), -1);
  EXPECT_EQ(events.create_event(0), nullptr);
  EXPECT_EQ(events.idle_stream(0), nullptr);
  EXPECT_FALSE(events.record(nullptr, nullptr));
  EXPECT_EQ(events.query(nullptr), inject::GpuEventState::kError);
  events.relax_capture_mode_for_this_thread();  // must not crash either

  std::vector<NcclOpRecord> emitted;
  NcclCompletionTracker tracker(
      events, [] { return uint64_t{42}; }, [&](const NcclOpRecord& op) { emitted.push_back(op); });
  NcclCompletionTracker::Mark start = tracker.mark(0, nullptr);
  NcclCompletionTracker::Mark end = tracker.mark(0, nullptr);
  EXPECT_FALSE(start.valid());
  EXPECT_FALSE(end.valid());
  NcclOpRecord op;
  op.info.enqueue_ns = 42;
  std::vector<NcclOpRecord> ops{op};
  tracker.submit(std::move(ops), std::move(start), std::move(end));
  ASSERT_EQ(emitted.size(), 1u);  // emitted at once, without GPU times
  EXPECT_EQ(emitted[0].info.end_ns, 0u);
  EXPECT_EQ(emitted[0].info.start_ns, 42u);
}

}  // namespace
}  // namespace moescope::testing
