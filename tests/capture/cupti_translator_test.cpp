// CuptiRecordTranslator driven with constructed CUPTI records (the real structs of
// cupti_activity.h, CUPTI API 130001); what it writes is read back from a real trace file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "../profiler/trace_test_reading.h"
#include "cupti_fake_api.h"
#include "cupti_record_translator.h"
#include "moescope/recorder.h"

namespace moescope::testing {
namespace {

namespace trace = moescope::trace;
using inject::CuptiRecordTranslator;

// Records into a fresh trace for the lifetime of the object; finish() returns what was written.
class Recording {
 public:
  explicit Recording(const std::string& name) : path_(temp_path(name + ".moetrace")) {
    EXPECT_EQ(moescope_recorder_start(path_.c_str(), nullptr), 0);
  }
  ~Recording() {
    moescope_recorder_stop();
    std::remove(path_.c_str());
  }
  LoadedTrace finish() {
    moescope_recorder_stop();
    return load_trace(path_);
  }

 private:
  std::string path_;
};

// Hands a record to the translator the way CUPTI does: as bytes in an 8-byte aligned buffer.
template <typename Record>
void feed(CuptiRecordTranslator& translator, const Record& record) {
  alignas(8) unsigned char storage[sizeof(Record)];
  std::memcpy(storage, &record, sizeof(Record));
  translator.translate(*reinterpret_cast<const CUpti_Activity*>(storage));
}

inject::CuptiKernelRecord make_kernel(const char* name, uint64_t start, uint64_t end) {
  inject::CuptiKernelRecord kernel;
  std::memset(&kernel, 0, sizeof(kernel));
  kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  kernel.name = name;
  kernel.start = start;
  kernel.end = end;
  kernel.deviceId = 2;
  kernel.contextId = 7;
  kernel.streamId = 13;
  kernel.correlationId = 4242;
  kernel.gridX = 128;
  kernel.gridY = 2;
  kernel.gridZ = 1;
  kernel.blockX = 256;
  kernel.blockY = 1;
  kernel.blockZ = 1;
  kernel.staticSharedMemory = 1024;
  kernel.dynamicSharedMemory = 3072;
  kernel.registersPerThread = 40;
  return kernel;
}

TEST(CuptiTranslator, KernelBecomesGpuKernelWithDemangledInternedName) {
  FakeCuptiApi api;
  Recording recording("kernel");
  CuptiRecordTranslator translator(api);
  // void at::native::vectorized_kernel<int>(int)
  auto kernel = make_kernel("_ZN2at6native17vectorized_kernelIiEEvi", 1000, 5000);
  feed(translator, kernel);
  EXPECT_EQ(translator.counts().kernels, 1u);

  LoadedTrace loaded = recording.finish();
  auto kernels = loaded.of_kind(trace::RecordKind::kGpuKernel);
  ASSERT_EQ(kernels.size(), 1u);
  auto record = kernels[0].as<trace::GpuKernelRecord>();
  EXPECT_EQ(record.header.time, 1000u);
  EXPECT_EQ(record.end_time, 5000u);
  EXPECT_EQ(record.correlation_id, 4242u);
  EXPECT_EQ(record.device, 2u);
  EXPECT_EQ(record.context, 7u);
  EXPECT_EQ(record.stream, 13u);
  EXPECT_EQ(record.grid[0], 128u);
  EXPECT_EQ(record.grid[1], 2u);
  EXPECT_EQ(record.block[0], 256u);
  EXPECT_EQ(record.shared_memory_bytes, 4096u);
  EXPECT_EQ(record.registers_per_thread, 40u);
  EXPECT_EQ(loaded.strings.at(record.header.name), "void at::native::vectorized_kernel<int>(int)");
}

TEST(CuptiTranslator, KernelWithoutTimingKeepsAZeroLengthSpan) {
  FakeCuptiApi api;
  Recording recording("kernel_untimed");
  CuptiRecordTranslator translator(api);
  auto kernel = make_kernel("plain_c_kernel", 9000, 0);  // CUPTI ran out of timing memory
  feed(translator, kernel);
  LoadedTrace loaded = recording.finish();
  auto kernels = loaded.of_kind(trace::RecordKind::kGpuKernel);
  ASSERT_EQ(kernels.size(), 1u);
  auto record = kernels[0].as<trace::GpuKernelRecord>();
  EXPECT_EQ(record.end_time, record.header.time);
  EXPECT_EQ(loaded.strings.at(record.header.name), "plain_c_kernel");
}

TEST(CuptiTranslator, MemcpyAndMemsetBecomeGpuCopies) {
  FakeCuptiApi api;
  Recording recording("copies");
  CuptiRecordTranslator translator(api);
  inject::CuptiMemcpyRecord copy;
  std::memset(&copy, 0, sizeof(copy));
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  copy.bytes = 1 << 20;
  copy.start = 100;
  copy.end = 400;
  copy.deviceId = 1;
  copy.streamId = 9;
  copy.correlationId = 77;
  inject::CuptiMemsetRecord memset;
  std::memset(&memset, 0, sizeof(memset));
  memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  memset.value = 0xAB;
  memset.bytes = 4096;
  memset.start = 500;
  memset.end = 510;
  memset.deviceId = 1;
  memset.streamId = 9;
  memset.correlationId = 78;
  feed(translator, copy);
  feed(translator, memset);
  copy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_PTOP;
  copy.correlationId = 79;
  feed(translator, copy);

  LoadedTrace loaded = recording.finish();
  auto copies = loaded.of_kind(trace::RecordKind::kGpuCopy);
  ASSERT_EQ(copies.size(), 3u);
  auto htod = copies[0].as<trace::GpuCopyRecord>();
  EXPECT_EQ(htod.header.time, 100u);
  EXPECT_EQ(htod.end_time, 400u);
  EXPECT_EQ(htod.bytes, 1u << 20);
  EXPECT_EQ(htod.copy_kind, MOESCOPE_COPY_HTOD);
  EXPECT_EQ(htod.is_memset, 0);
  EXPECT_EQ(htod.correlation_id, 77u);
  EXPECT_EQ(htod.device, 1u);
  EXPECT_EQ(htod.stream, 9u);
  auto set = copies[1].as<trace::GpuCopyRecord>();
  EXPECT_EQ(set.is_memset, 1);
  EXPECT_EQ(set.value, 0xABu);
  EXPECT_EQ(set.bytes, 4096u);
  EXPECT_EQ(set.correlation_id, 78u);
  EXPECT_EQ(copies[2].as<trace::GpuCopyRecord>().copy_kind, MOESCOPE_COPY_PTOP);
}

TEST(CuptiTranslator, Memory2BecomesTimedAllocationAndRelease) {
  FakeCuptiApi api;
  Recording recording("memory");
  CuptiRecordTranslator translator(api);
  inject::CuptiMemoryRecord memory;
  std::memset(&memory, 0, sizeof(memory));
  memory.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  memory.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  memory.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  memory.address = 0x7f0000000000ull;
  memory.bytes = 2ull << 30;
  memory.timestamp = 123456789;
  memory.deviceId = 3;
  feed(translator, memory);
  memory.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  memory.timestamp = 223456789;
  feed(translator, memory);
  memory.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;  // host memory: device -1
  memory.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
  feed(translator, memory);

  LoadedTrace loaded = recording.finish();
  auto events = loaded.of_kind(trace::RecordKind::kMemory);
  ASSERT_EQ(events.size(), 3u);
  auto allocation = events[0].as<trace::MemoryRecord>();
  EXPECT_EQ(allocation.header.time, 123456789u);  // CUPTI's time, not the delivery time
  EXPECT_EQ(allocation.address, 0x7f0000000000ull);
  EXPECT_EQ(allocation.bytes, 2ull << 30);
  EXPECT_EQ(allocation.device, 3);
  EXPECT_EQ(allocation.is_free, 0);
  EXPECT_EQ(allocation.category, MOESCOPE_MEM_CUDA_DRIVER);
  auto release = events[1].as<trace::MemoryRecord>();
  EXPECT_EQ(release.header.time, 223456789u);
  EXPECT_EQ(release.is_free, 1);
  EXPECT_EQ(events[2].as<trace::MemoryRecord>().device, -1);
}

TEST(CuptiTranslator, SynchronizationGetsItsDeviceFromTheContext) {
  FakeCuptiApi api;
  Recording recording("sync");
  CuptiRecordTranslator translator(api);
  inject::CuptiContextRecord context;
  std::memset(&context, 0, sizeof(context));
  context.kind = CUPTI_ACTIVITY_KIND_CONTEXT;
  context.contextId = 5;
  context.deviceId = 6;
  feed(translator, context);
  inject::CuptiSyncRecord sync;
  std::memset(&sync, 0, sizeof(sync));
  sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.start = 1000;
  sync.end = 9000;
  sync.contextId = 5;
  sync.streamId = 21;
  sync.correlationId = 31;
  feed(translator, sync);
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  sync.contextId = 99;  // never seen
  feed(translator, sync);

  LoadedTrace loaded = recording.finish();
  auto syncs = loaded.of_kind(trace::RecordKind::kGpuSync);
  ASSERT_EQ(syncs.size(), 2u);
  auto stream_sync = syncs[0].as<trace::GpuSyncRecord>();
  EXPECT_EQ(stream_sync.sync_kind, MOESCOPE_SYNC_STREAM);
  EXPECT_EQ(stream_sync.header.time, 1000u);
  EXPECT_EQ(stream_sync.end_time, 9000u);
  EXPECT_EQ(stream_sync.device, 6u);
  EXPECT_EQ(stream_sync.stream, 21u);
  EXPECT_EQ(stream_sync.correlation_id, 31u);
  auto device_sync = syncs[1].as<trace::GpuSyncRecord>();
  EXPECT_EQ(device_sync.sync_kind, MOESCOPE_SYNC_DEVICE);
  EXPECT_EQ(device_sync.device, inject::kUnknownDevice);
}

TEST(CuptiTranslator, LaunchCallsAreKeptWithCorrelationOthersSkipped) {
  FakeCuptiApi api;
  constexpr uint32_t kLaunch = 211, kGetDevice = 10, kCuLaunch = 307;
  api.names[(uint64_t{CUPTI_CB_DOMAIN_RUNTIME_API} << 32) | kLaunch] = "cudaLaunchKernel_v7000";
  api.names[(uint64_t{CUPTI_CB_DOMAIN_RUNTIME_API} << 32) | kGetDevice] = "cudaGetDevice_v3020";
  api.names[(uint64_t{CUPTI_CB_DOMAIN_DRIVER_API} << 32) | kCuLaunch] = "cuLaunchKernel";
  Recording recording("api");
  CuptiRecordTranslator translator(api);
  inject::CuptiApiRecord call;
  std::memset(&call, 0, sizeof(call));
  call.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  call.cbid = kLaunch;
  call.start = 50;
  call.end = 80;
  call.correlationId = 4242;
  feed(translator, call);
  call.cbid = kGetDevice;
  call.correlationId = 4243;
  feed(translator, call);
  call.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  call.cbid = kCuLaunch;
  call.correlationId = 4244;
  feed(translator, call);
  EXPECT_EQ(translator.counts().api_calls, 2u);
  EXPECT_EQ(translator.counts().api_calls_skipped, 1u);

  LoadedTrace loaded = recording.finish();
  auto calls = loaded.of_kind(trace::RecordKind::kApiCall);
  ASSERT_EQ(calls.size(), 2u);
  auto launch = calls[0].as<trace::ApiCallRecord>();
  EXPECT_EQ(loaded.strings.at(launch.header.name), "cudaLaunchKernel");
  EXPECT_EQ(launch.header.time, 50u);
  EXPECT_EQ(launch.end_time, 80u);
  EXPECT_EQ(launch.correlation_id, 4242u);
  auto driver = calls[1].as<trace::ApiCallRecord>();
  EXPECT_EQ(loaded.strings.at(driver.header.name), "cuLaunchKernel");
  EXPECT_EQ(driver.correlation_id, 4244u);
}

TEST(CuptiTranslator, KeepAllApiCallsAlsoKeepsQueries) {
  FakeCuptiApi api;
  api.names[(uint64_t{CUPTI_CB_DOMAIN_RUNTIME_API} << 32) | 10] = "cudaGetDevice_v3020";
  Recording recording("api_all");
  CuptiRecordTranslator translator(api, /*keep_all_api_calls=*/true);
  inject::CuptiApiRecord call;
  std::memset(&call, 0, sizeof(call));
  call.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  call.cbid = 10;
  feed(translator, call);
  call.cbid = 12345;  // no name known: named by its id
  feed(translator, call);
  LoadedTrace loaded = recording.finish();
  auto calls = loaded.of_kind(trace::RecordKind::kApiCall);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(loaded.strings.at(calls[0].header().name), "cudaGetDevice");
  EXPECT_EQ(loaded.strings.at(calls[1].header().name), "cudaApi#12345");
}

TEST(CuptiTranslator, NameHelpers) {
  EXPECT_EQ(CuptiRecordTranslator::strip_version_suffix("cudaMemcpyAsync_v3020"),
            "cudaMemcpyAsync");
  EXPECT_EQ(CuptiRecordTranslator::strip_version_suffix("cuMemAlloc_v2"), "cuMemAlloc");
  EXPECT_EQ(CuptiRecordTranslator::strip_version_suffix("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(CuptiRecordTranslator::strip_version_suffix("odd_vx"), "odd_vx");
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cudaLaunchKernel"));
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cudaMemcpyAsync"));
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cudaStreamSynchronize"));
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cudaMallocAsync"));
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cuMemFree"));
  EXPECT_TRUE(CuptiRecordTranslator::is_gpu_work_call("cudaGraphLaunch"));
  EXPECT_FALSE(CuptiRecordTranslator::is_gpu_work_call("cudaGetDevice"));
  EXPECT_FALSE(CuptiRecordTranslator::is_gpu_work_call("cudaGetLastError"));
  EXPECT_EQ(CuptiRecordTranslator::demangle("_Z6kernelPf"), "kernel(float*)");
  EXPECT_EQ(CuptiRecordTranslator::demangle("not_mangled"), "not_mangled");
  EXPECT_EQ(CuptiRecordTranslator::demangle("_Zgarbage!"), "_Zgarbage!");
}

}  // namespace
}  // namespace moescope::testing
