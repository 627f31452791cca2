// GPU start/end times of NCCL ops from CUDA events, on the recorder's host clock.
//
//   host thread:  mark(stream) before the op's kernel   -> start event on the op's stream
//                 NCCL enqueues its kernel
//                 mark(stream) after it                  -> end event
//                 submit(op, start, end)                 -> pending list
//   poller:       every poll_interval: end event done?   -> start/end = reference host time +
//                 cudaEventElapsedTime(reference, event)  -> emit (moescope_comm_op)
//
// A reference is an event recorded on an idle stream of the device and synchronized, with the
// host time taken around it: GPU event times become host times with an error of about half the
// record+synchronize round trip (microseconds). References are made only by poll() (the poller
// thread, in relaxed capture mode), never on the thread that issues the op: nothing there
// synchronizes, and its event records run in relaxed capture mode, so a CUDA graph captured on
// any thread stays valid. An op issued before the device had a reference is measured back from
// the next one. cudaEventElapsedTime returns float
// milliseconds, so references are renewed every `reference_lifetime_ns` to keep the float's
// resolution (10 s -> < 1 us). An op whose timing failed (graph capture, CUDA error, shutdown)
// is still emitted, with end_ns = 0 ("unknown").
//
// Programs that never synchronize: the poller queries, per stream, only up to the first op not
// done yet (events on one stream complete in order), so a long queue costs one query per
// stream and poll; the queue is bounded (Options::max_pending: later ops are emitted at once
// without GPU times, with a note) and whatever completed is emitted as it completes. Ops still
// running when the recording stops are written with end = 0 and a note saying how many.
// An aborted communicator (ncclCommAbort): its pending ops are written at once with end = 0
// and a note, and their events are never queried again (the comm's stream may never finish).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moescope/recorder.h"
#include "nccl_gpu_events.h"

namespace moescope::inject {

// A comm op without the pointer fields of moescope_comm_op_info (those are owned here).
struct NcclOpRecord {
  moescope_comm_op_info info{};  // split_bytes / num_splits are set from `split_bytes` on emit
  std::vector<uint64_t> split_bytes;
};

class NcclCompletionTracker {
 public:
  struct Reference;
  // An event recorded on a stream, tied to the reference it will be measured against.
  struct Mark {
    GpuEventApi::Event event = nullptr;
    int device = -1;
    GpuEventApi::Stream stream = nullptr;
    std::shared_ptr<Reference> reference;  // empty: measured from a later one (poll())
    bool captured = false;  // not made: the stream was being captured into a CUDA graph
    bool valid() const { return event != nullptr; }
  };
  using Clock = std::function<uint64_t()>;
  using Emit = std::function<void(const NcclOpRecord&)>;
  // A line for the trace about ops written without GPU times (default: an instant in the
  // "NCCL" domain).
  using Note = std::function<void(const std::string&)>;
  // An op now waits for the GPU (default: moescope_comm_op_enter, so that one still pending a
  // second later gets a collective_open record: what a rank hung in NCCL waits in).
  using Entered = std::function<void(const moescope_comm_op_info&)>;

  struct Options {
    uint32_t poll_interval_ms = 2;
    uint64_t reference_lifetime_ns = 10'000'000'000ull;
    size_t max_pending = 1u << 16;  // beyond it ops are emitted at once without GPU times
    Note note;                      // empty: moescope_instant in the "NCCL" domain
    Entered entered;                // empty: moescope_comm_op_enter
  };

  NcclCompletionTracker(GpuEventApi& events, Clock host_clock, Emit emit, Options options);
  NcclCompletionTracker(GpuEventApi& events, Clock host_clock, Emit emit)
      : NcclCompletionTracker(events, std::move(host_clock), std::move(emit), Options()) {}
  ~NcclCompletionTracker();
  NcclCompletionTracker(const NcclCompletionTracker&) = delete;
  NcclCompletionTracker& operator=(const NcclCompletionTracker&) = delete;

  // False when the CUDA runtime is missing: the caller emits ops directly.
  bool usable();
  // Records a timing event on `stream` of `device` now. Invalid when not possible (stream
  // being captured into a CUDA graph, CUDA error).
  Mark mark(int device, GpuEventApi::Stream stream);
  // Queues `ops` (all issued on the stream of both marks, e.g. the sends and receives of one
  // group) until `end` completes; they share the marks' times. With an invalid end mark the
  // ops are emitted at once without GPU times (start = enqueue, end = 0).
  void submit(std::vector<NcclOpRecord> ops, Mark start, Mark end);
  // Emits every op whose end event completed; returns how many. Called by the poller.
  size_t poll();
  // Emits every pending op now: completed ones with GPU times, the rest with end = 0 (and a
  // note counting them).
  void drain();
  // The communicator `comm_id` was aborted: its pending ops are emitted now with end = 0 and a
  // note, without querying their events (they are leaked, not destroyed: no CUDA call touches
  // the dead communicator's stream). Returns how many ops.
  size_t abort_comm(uint64_t comm_id, const char* call_name);
  size_t pending() const;

  // Restartable: a stop_poller() followed by start_poller() runs a new poller thread.
  void start_poller();
  void stop_poller();
  bool poller_running();
  // In a forked child: the poller does not exist there; forget pending ops (they belong to the
  // parent's GPU context).
  void abandon_after_fork();

 private:
  struct PendingOp {
    std::vector<NcclOpRecord> ops;
    Mark start;
    Mark end;
  };
  // The device's current reference; a new one only when `may_create` (it synchronizes).
  std::shared_ptr<Reference> reference_for(int device, bool may_create);
  GpuEventApi::Event take_event(int device);
  void give_back(Mark& mark);
  // Host time of a completed mark's event; 0 when it cannot be measured.
  uint64_t host_time_of(const Mark& mark);
  void emit_resolved(PendingOp& pending, bool completed);
  void write_note(const std::string& text);
  void poller_loop();

  GpuEventApi& events_;
  Clock host_clock_;
  Emit emit_;
  Options options_;

  mutable std::mutex mutex_;
  std::vector<PendingOp> pending_;
  std::vector<std::shared_ptr<Reference>> references_;        // current one per device
  std::vector<std::vector<GpuEventApi::Event>> free_events_;  // per device
  bool queue_full_noted_ = false;                             // until the queue drains to half
  bool graph_capture_noted_ = false;                          // once per recording (drain)

  std::thread poller_;
  std::mutex poller_mutex_;
  std::condition_variable poller_wakeup_;
  bool stop_poller_ = false;
};

// Starts the tracker's poller once per recording, from every interposed op, and stops it when
// the capture stops; the next recording starts it again, and so does a forked child that
// records. A recording is identified by a number that changes whenever one starts (the
// recorder's generation); 0 means none.
//
//   recording 5: op -> poller started ... op (one relaxed load) ... shut_down(5): stopped,
//                drained; a late op of recording 5 does not start it again
//   recording 6: op -> poller started again
class NcclPollerGate {
 public:
  explicit NcclPollerGate(NcclCompletionTracker& tracker) : tracker_(tracker) {}
  NcclPollerGate(const NcclPollerGate&) = delete;
  NcclPollerGate& operator=(const NcclPollerGate&) = delete;

  // After each recorded op. One relaxed load once the poller was started for `recording`
  // (or the tracker is not usable, or the capture stopped during this recording).
  void op_issued(uint64_t recording) {
    if (handled_for_.load(std::memory_order_relaxed) != recording) start_for(recording);
  }
  // Stops the poller and emits what is pending; ops later in `recording` leave it stopped.
  void shut_down(uint64_t recording);
  // In a forked child, after tracker.abandon_after_fork(): the next recording starts a poller.
  void after_fork_in_child();

 private:
  void start_for(uint64_t recording);

  NcclCompletionTracker& tracker_;
  std::mutex mutex_;  // start/stop decisions; never waited for by an op
  std::atomic<uint64_t> handled_for_{0};
};

struct NcclCompletionTracker::Reference {
  GpuEventApi* events = nullptr;
  GpuEventApi::Event event = nullptr;
  int device = -1;
  uint64_t host_ns = 0;     // host time at which the reference event completed on the GPU
  uint64_t created_ns = 0;  // host time it was made (for renewal)
  ~Reference();
};

}  // namespace moescope::inject
