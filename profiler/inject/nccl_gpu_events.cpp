#include "nccl_gpu_events.h"

#include <dlfcn.h>

#include <mutex>

namespace moescope::inject {
namespace {

constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorNotReady = 600;
constexpr unsigned kCudaEventDefault = 0;       // timing enabled
constexpr unsigned kCudaStreamNonBlocking = 1;  // does not wait for the legacy default stream
constexpr int kCudaStreamCaptureStatusNone = 0;
constexpr int kCudaStreamCaptureModeRelaxed = 2;

std::mutex g_stream_mutex;

// The runtime as the host program sees it; never loads a new copy.
void* runtime_symbol(const char* name) {
  if (void* symbol = dlsym(RTLD_DEFAULT, name)) return symbol;
  // Python loads torch with RTLD_LOCAL: its libcudart is loaded but not global.
  for (const char* soname : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"}) {
    if (void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD)) {
      if (void* symbol = dlsym(handle, name)) return symbol;
    }
  }
  return nullptr;
}

template <typename Function>
bool bind(const char* name, Function& out) {
  out = reinterpret_cast<Function>(runtime_symbol(name));
  return out != nullptr;
}

// Runs `body` with `device` current on this thread, restoring the previous device.
template <typename Body>
auto on_device(GpuEventApi& api, int device, Body body) {
  int previous = api.current_device();
  bool switched = previous >= 0 && previous != device && api.set_device(device);
  auto result = body();
  if (switched) api.set_device(previous);
  return result;
}

}  // namespace

bool CudaRuntimeEvents::resolve() {
  int resolved = resolved_.load(std::memory_order_acquire);
  if (resolved >= 0) return resolved == 1;  // every call after the first: one load
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (resolved_.load(std::memory_order_relaxed) >= 0) return resolved_.load() == 1;
  bool ok = bind("cudaGetDevice", get_device_) && bind("cudaSetDevice", set_device_) &&
            bind("cudaEventCreateWithFlags", event_create_with_flags_) &&
            bind("cudaEventDestroy", event_destroy_) && bind("cudaEventRecord", event_record_) &&
            bind("cudaEventQuery", event_query_) && bind("cudaEventElapsedTime", event_elapsed_) &&
            bind("cudaEventSynchronize", event_synchronize_) &&
            bind("cudaStreamCreateWithFlags", stream_create_with_flags_) &&
            bind("cudaStreamIsCapturing", stream_is_capturing_) &&
            bind("cudaThreadExchangeStreamCaptureMode", exchange_capture_mode_);
  resolved_.store(ok ? 1 : 0, std::memory_order_release);
  return ok;
}

bool CudaRuntimeEvents::usable() {
  return resolve();
}

int CudaRuntimeEvents::current_device() {
  int device = -1;
  if (!resolve() || get_device_(&device) != kCudaSuccess) return -1;
  return device;
}

bool CudaRuntimeEvents::set_device(int device) {
  return resolve() && set_device_(device) == kCudaSuccess;
}

GpuEventApi::Event CudaRuntimeEvents::create_event(int device) {
  if (!resolve()) return nullptr;
  return on_device(*this, device, [&]() -> Event {
    Event event = nullptr;
    if (event_create_with_flags_(&event, kCudaEventDefault) != kCudaSuccess) return nullptr;
    return event;
  });
}

void CudaRuntimeEvents::destroy_event(int, Event event) {
  if (resolve() && event) event_destroy_(event);
}

bool CudaRuntimeEvents::record(Event event, Stream stream) {
  return resolve() && event && event_record_(event, stream) == kCudaSuccess;
}

GpuEventState CudaRuntimeEvents::query(Event event) {
  if (!resolve() || !event) return GpuEventState::kError;
  int status = event_query_(event);
  if (status == kCudaSuccess) return GpuEventState::kDone;
  if (status == kCudaErrorNotReady) return GpuEventState::kPending;
  return GpuEventState::kError;
}

bool CudaRuntimeEvents::elapsed_ms(Event from, Event to, float* milliseconds) {
  return resolve() && event_elapsed_(milliseconds, from, to) == kCudaSuccess;
}

bool CudaRuntimeEvents::synchronize(Event event) {
  return resolve() && event_synchronize_(event) == kCudaSuccess;
}

GpuEventApi::Stream CudaRuntimeEvents::idle_stream(int device) {
  if (!resolve() || device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> lock(g_stream_mutex);
  if (!idle_streams_[device]) {
    idle_streams_[device] = on_device(*this, device, [&]() -> Stream {
      Stream stream = nullptr;
      if (stream_create_with_flags_(&stream, kCudaStreamNonBlocking) != kCudaSuccess) {
        return nullptr;
      }
      return stream;
    });
  }
  return idle_streams_[device];
}

bool CudaRuntimeEvents::stream_capturing(Stream stream) {
  if (!resolve()) return false;
  int status = kCudaStreamCaptureStatusNone;
  if (stream_is_capturing_(stream, &status) != kCudaSuccess) return true;  // unsure: stay away
  return status != kCudaStreamCaptureStatusNone;
}

int CudaRuntimeEvents::exchange_capture_mode(int mode) {
  if (!resolve() || exchange_capture_mode_(&mode) != kCudaSuccess) return -1;
  return mode;
}

void CudaRuntimeEvents::relax_capture_mode_for_this_thread() {
  if (!resolve()) return;
  int mode = kCudaStreamCaptureModeRelaxed;
  exchange_capture_mode_(&mode);
}

}  // namespace moescope::inject
