// The vendor layer for timing NCCL ops on the GPU: CUDA events behind a small class that tests
// replace with a fake clock (tests/capture/nccl_completion_test.cpp).
//
// The real implementation resolves the CUDA runtime lazily in the host program (dlsym with
// RTLD_DEFAULT, then an already-loaded libcudart by soname): the shim never loads or links
// CUDA itself. Handles are opaque pointers (cudaEvent_t / cudaStream_t).
#pragma once

#include <atomic>
#include <cstdint>

namespace moescope::inject {

enum class GpuEventState { kPending, kDone, kError };

class GpuEventApi {
 public:
  using Event = void*;
  using Stream = void*;
  virtual ~GpuEventApi() = default;

  // False when no CUDA runtime is present: ops are then recorded without GPU times.
  virtual bool usable() = 0;
  // The calling thread's current device, -1 on error.
  virtual int current_device() = 0;
  virtual bool set_device(int device) = 0;
  // A timing event on `device` (nullptr on failure).
  virtual Event create_event(int device) = 0;
  virtual void destroy_event(int device, Event event) = 0;
  virtual bool record(Event event, Stream stream) = 0;
  virtual GpuEventState query(Event event) = 0;
  // Milliseconds from `from` to `to` (both completed), as cudaEventElapsedTime.
  virtual bool elapsed_ms(Event from, Event to, float* milliseconds) = 0;
  virtual bool synchronize(Event event) = 0;
  // An idle stream of `device` for reference events (created once, owned by the layer).
  virtual Stream idle_stream(int device) = 0;
  // True while `stream` is being captured into a CUDA graph: events must not be recorded.
  virtual bool stream_capturing(Stream stream) = 0;
  // Lets this thread query events while another thread captures a CUDA graph in global mode.
  virtual void relax_capture_mode_for_this_thread() = 0;
  // Sets this thread's stream capture mode (cudaThreadExchangeStreamCaptureMode) and returns
  // the previous one; -1 when unknown. The default does nothing (no runtime, fakes).
  virtual int exchange_capture_mode(int mode) {
    (void)mode;
    return -1;
  }
};

// cudaStreamCaptureModeRelaxed: this thread's CUDA calls never invalidate a capture that
// another thread runs in global mode.
inline constexpr int kRelaxedCaptureMode = 2;

// Relaxed capture mode on this thread for a scope, then the program's own mode again: the
// interposer's few CUDA calls on an application thread (event records on a stream that is not
// capturing) must not break a CUDA graph another thread is capturing.
class ScopedRelaxedCaptureMode {
 public:
  explicit ScopedRelaxedCaptureMode(GpuEventApi& api)
      : api_(api), previous_(api.exchange_capture_mode(kRelaxedCaptureMode)) {}
  ~ScopedRelaxedCaptureMode() {
    if (previous_ >= 0 && previous_ != kRelaxedCaptureMode) api_.exchange_capture_mode(previous_);
  }
  ScopedRelaxedCaptureMode(const ScopedRelaxedCaptureMode&) = delete;
  ScopedRelaxedCaptureMode& operator=(const ScopedRelaxedCaptureMode&) = delete;

 private:
  GpuEventApi& api_;
  int previous_;
};

// The CUDA runtime of the host program, found at first use. Thread-safe.
class CudaRuntimeEvents final : public GpuEventApi {
 public:
  CudaRuntimeEvents() = default;
  bool usable() override;
  int current_device() override;
  bool set_device(int device) override;
  Event create_event(int device) override;
  void destroy_event(int device, Event event) override;
  bool record(Event event, Stream stream) override;
  GpuEventState query(Event event) override;
  bool elapsed_ms(Event from, Event to, float* milliseconds) override;
  bool synchronize(Event event) override;
  Stream idle_stream(int device) override;
  bool stream_capturing(Stream stream) override;
  void relax_capture_mode_for_this_thread() override;
  int exchange_capture_mode(int mode) override;

 private:
  bool resolve();

  std::atomic<int> resolved_{-1};  // -1 not tried, 0 failed, 1 ok
  int (*get_device_)(int*) = nullptr;
  int (*set_device_)(int) = nullptr;
  int (*event_create_with_flags_)(Event*, unsigned) = nullptr;
  int (*event_destroy_)(Event) = nullptr;
  int (*event_record_)(Event, Stream) = nullptr;
  int (*event_query_)(Event) = nullptr;
  int (*event_elapsed_)(float*, Event, Event) = nullptr;
  int (*event_synchronize_)(Event) = nullptr;
  int (*stream_create_with_flags_)(Stream*, unsigned) = nullptr;
  int (*stream_is_capturing_)(Stream, int*) = nullptr;
  int (*exchange_capture_mode_)(int*) = nullptr;
  static constexpr int kMaxDevices = 64;
  Stream idle_streams_[kMaxDevices] = {};
};

}  // namespace moescope::inject
