// Fakes for the NCCL timing layer: a GPU whose event times the test decides, a host clock the
// test moves, and communicators whose rank/size/device the test sets.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "nccl_gpu_events.h"
#include "nccl_op_recorder.h"

namespace moescope::testing {

// The GPU clock runs `gpu_offset_ns` ahead of the host clock (different epochs, as real GPUs).
class FakeGpuEvents final : public inject::GpuEventApi {
 public:
  struct FakeEvent {
    int device = -1;
    Stream stream = nullptr;
    bool recorded = false;
    bool done = false;
    bool failed = false;
    uint64_t gpu_ns = 0;
    int queries = 0;  // how often query() asked about it
  };

  explicit FakeGpuEvents(uint64_t* host_now, uint64_t gpu_offset_ns = 5'000'000'000ull)
      : host_now_(host_now), gpu_offset_ns_(gpu_offset_ns) {}

  bool runtime_present = true;
  std::set<Stream> capturing_streams;
  int current = 0;
  int created = 0;
  int destroyed = 0;
  int reference_records = 0;

  bool usable() override { return runtime_present; }
  int current_device() override { return current; }
  bool set_device(int device) override {
    current = device;
    return true;
  }
  Event create_event(int device) override {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(new FakeEvent{device});
    ++created;
    return events_.back();
  }
  void destroy_event(int, Event event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++destroyed;
    auto* fake = static_cast<FakeEvent*>(event);
    fake->recorded = false;  // kept allocated so stale handles stay readable in tests
  }
  bool record(Event event, Stream stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* fake = static_cast<FakeEvent*>(event);
    fake->stream = stream;
    fake->recorded = true;
    fake->done = false;
    fake->failed = false;
    if (stream == idle_stream_handle(fake->device)) {
      // The idle stream runs the reference event at once, on the GPU clock.
      fake->done = true;
      fake->gpu_ns = *host_now_ + gpu_offset_ns_;
      ++reference_records;
    } else {
      recorded_.push_back(fake);
    }
    return true;
  }
  inject::GpuEventState query(Event event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* fake = static_cast<FakeEvent*>(event);
    ++fake->queries;
    if (fake->failed) return inject::GpuEventState::kError;
    return fake->done ? inject::GpuEventState::kDone : inject::GpuEventState::kPending;
  }
  bool elapsed_ms(Event from, Event to, float* milliseconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto* a = static_cast<FakeEvent*>(from);
    auto* b = static_cast<FakeEvent*>(to);
    if (!a->done || !b->done) return false;
    *milliseconds = static_cast<float>((static_cast<double>(b->gpu_ns) - a->gpu_ns) / 1e6);
    return true;
  }
  bool synchronize(Event event) override { return static_cast<FakeEvent*>(event)->done; }
  Stream idle_stream(int device) override { return idle_stream_handle(device); }
  bool stream_capturing(Stream stream) override { return capturing_streams.count(stream) > 0; }
  void relax_capture_mode_for_this_thread() override {}
  // The thread's capture mode as cudaThreadExchangeStreamCaptureMode keeps it (0: global, the
  // CUDA default), and every mode set, in order.
  int capture_mode = 0;
  std::vector<int> capture_modes_set;
  int exchange_capture_mode(int mode) override {
    std::lock_guard<std::mutex> lock(mutex_);
    capture_modes_set.push_back(mode);
    std::swap(mode, capture_mode);
    return mode;
  }

  // Events recorded on op streams, in record order.
  std::vector<FakeEvent*> recorded_events() {
    std::lock_guard<std::mutex> lock(mutex_);
    return recorded_;
  }
  // The GPU reached `event` at host time `host_ns` (converted to the GPU clock).
  void complete(FakeEvent* event, uint64_t host_ns) {
    std::lock_guard<std::mutex> lock(mutex_);
    event->done = true;
    event->gpu_ns = host_ns + gpu_offset_ns_;
  }
  void fail(FakeEvent* event) {
    std::lock_guard<std::mutex> lock(mutex_);
    event->failed = true;
  }

  ~FakeGpuEvents() override {
    for (FakeEvent* event : events_) delete event;
  }

 private:
  static Stream idle_stream_handle(int device) {
    return reinterpret_cast<Stream>(static_cast<uintptr_t>(0x1D1E0000u + device));
  }

  uint64_t* host_now_;
  uint64_t gpu_offset_ns_;
  std::mutex mutex_;
  std::vector<FakeEvent*> events_;
  std::vector<FakeEvent*> recorded_;
};

class FakeCommQueries final : public inject::NcclCommQueries {
 public:
  struct Answers {
    int rank = -1;
    int num_ranks = -1;
    int device = -1;
  };
  std::map<inject::nccl::CommHandle, Answers> comms;

  bool user_rank(inject::nccl::CommHandle comm, int* rank) override {
    auto found = comms.find(comm);
    if (found == comms.end() || found->second.rank < 0) return false;
    *rank = found->second.rank;
    return true;
  }
  bool count(inject::nccl::CommHandle comm, int* num_ranks) override {
    auto found = comms.find(comm);
    if (found == comms.end() || found->second.num_ranks < 0) return false;
    *num_ranks = found->second.num_ranks;
    return true;
  }
  bool cuda_device(inject::nccl::CommHandle comm, int* device) override {
    auto found = comms.find(comm);
    if (found == comms.end() || found->second.device < 0) return false;
    *device = found->second.device;
    return true;
  }
};

}  // namespace moescope::testing
