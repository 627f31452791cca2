// The process-wide recorder behind the C API: thread registry, flush thread and trace writer.
//
//   recording threads --records--> ThreadBuffer (one per thread, lock-free)
//                                        | drained every flush interval (100 ms)
//   flush thread: ticks -> ns, 1 MB chunks, zstd, checksum --> TraceWriter --> file
//
// One instance per process, never destroyed (it must outlive static destructors that may
// still record). A recording has a generation number; buffers of older generations are
// ignored by the hot path and re-created on demand.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capture_window.h"
#include "collective_progress.h"
#include "flight_ring.h"
#include "moescope/recorder.h"
#include "moescope/trace/trace_writer.h"
#include "string_table.h"
#include "thread_buffer.h"
#include "tick_clock.h"
#include "trace_path.h"

namespace moescope::recorder {

struct RecorderOptions {
  uint32_t flush_interval_ms = 100;      // MOESCOPE_FLUSH_MS; a killed run loses at most this much
  size_t max_buffer_bytes = 256u << 20;  // MOESCOPE_BUFFER_MB; beyond it records are dropped
  static RecorderOptions from_environment();
};

class Recorder {
 public:
  static Recorder& instance() {
    // Deliberately leaked: static destructors of the host program may still record.
    static Recorder* recorder = s_instance = new Recorder;
    return *recorder;
  }
  // The hot path's view, without instance()'s first-use guard: the calling thread's buffer
  // when the recorder exists and the buffer belongs to the current recording, else nullptr
  // (the caller then takes thread_buffer()). Makes no call, so the entry points that use it
  // stay leaf functions.
  static ThreadBuffer* registered_thread_buffer() {
    ThreadBuffer* buffer = t_buffer;
    // A thread has a buffer only once the recorder exists: s_instance is set then.
    if (!buffer ||
        buffer->generation() != s_instance->generation_.load(std::memory_order_relaxed)) {
      return nullptr;
    }
    return buffer;
  }

  bool start(const char* path_pattern, const char* metadata_json);
  void stop();
  // Writes everything recorded so far; returns when it is in the file (fflush'd).
  void flush();
  // In a forked child: forget the parent's recording without touching its file. The child
  // records nothing until a recording is started in it (the shim starts one with --fork=trace).
  void abandon_after_fork();
  // Registers the pthread_atfork handlers that keep a fork from copying the flush thread in the
  // middle of a drain, and make the child abandon the parent's recording. Once per process;
  // start() calls it too. A caller with its own atfork handlers calls it before registering
  // them: child handlers run in registration order, so the child sees the recording abandoned.
  static void install_fork_handlers();

  // The calling thread's buffer for the current recording, registering the thread if needed.
  ThreadBuffer* thread_buffer() {
    ThreadBuffer* buffer = t_buffer;
    if (buffer && buffer->generation() == generation_.load(std::memory_order_relaxed)) {
      return buffer;
    }
    return register_current_thread();
  }
  StringTable& strings() { return strings_; }
  uint64_t generation() const { return generation_.load(std::memory_order_relaxed); }
  void count_dropped(uint64_t records) {
    external_dropped_.fetch_add(records, std::memory_order_relaxed);
  }
  const std::string& path() const { return path_; }
  bool active() const { return active_.load(std::memory_order_acquire); }
  void rename_current_thread(const char* name);

  // ---- capture windows and the flight recorder (capture_window.h, flight_ring.h) ----
  bool flight_mode() const { return flight_options_.enabled && active(); }
  const FlightOptions& flight_options() const { return flight_options_; }
  FlightRing& flight_ring() { return ring_; }
  CollectiveProgress& collective_progress() { return collectives_; }
  // Under the flight recorder: writes the ring now, with `trigger`'s record and `extra_json`
  // (an object merged into the dump's metadata). Waits for the flush thread to write it (at
  // most `wait_ms`); returns the dump's path, or "" when nothing was written. Without the
  // flight recorder: only records the trigger.
  std::string dump(const moescope_trigger_info& trigger, const std::string& extra_json,
                   uint32_t wait_ms = 30000);
  // From a fatal signal's handler: writes what the ring holds (async-signal-safe).
  void dump_from_signal_handler(int signal_number, int32_t origin_rank);
  // Called by moescope_trigger() under the flight recorder instead of dump() (the capture shim
  // sets it to add what it knows and to make the dump job-wide).
  using TriggerHandler = void (*)(const moescope_trigger_info* trigger);
  void set_trigger_handler(TriggerHandler handler) { trigger_handler_ = handler; }
  TriggerHandler trigger_handler() const { return trigger_handler_; }
  uint32_t dumps_written() const { return dumps_written_.load(); }

 private:
  Recorder();
  ThreadBuffer* register_current_thread();
  void flush_loop();
  void drain_all(bool final);
  void write_records(uint32_t stream, std::vector<uint8_t>& records, trace::ChunkType type);
  void convert_ticks(std::vector<uint8_t>& records, uint64_t& stream_last_ns) const;
  void warn_write_failure();
  void append_stats(trace::RecordBuffer& out);
  void retire_threads();  // needs threads_mutex_
  // Windowed or flight-recorder drain: all streams first (step markers place the window), then
  // filtered, then written or kept in the ring.
  void drain_windowed(const std::vector<ThreadBuffer*>& snapshot, std::vector<ThreadBuffer*>& gone);
  struct DumpRequest {
    std::vector<uint8_t> trigger_record;
    std::string extra_json;
    std::string path;  // set once written
    bool done = false;
  };
  void write_dumps(std::vector<std::shared_ptr<DumpRequest>>& requests);
  std::string dump_path(uint32_t index) const;
  void prepare_crash_dump();

  // A plain pointer with the initial-exec model: one TLS load on the hot path, no wrapper call.
  __attribute__((tls_model("initial-exec"))) static inline thread_local ThreadBuffer* t_buffer =
      nullptr;
  static inline Recorder* s_instance = nullptr;  // set once by instance()

  RecorderOptions options_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> active_{false};
  std::string path_;
  std::mutex lifecycle_mutex_;  // start/stop/flush callers

  std::mutex threads_mutex_;
  std::vector<ThreadBuffer*> threads_;
  // Buffers of earlier recordings whose threads may still be inside a call: kept (not freed)
  // until their thread exits.
  std::vector<ThreadBuffer*> retired_;
  uint32_t next_stream_ = 1;  // stream 0 carries strings and stats
  BlockPool* pool_ = nullptr;

  StringTable strings_;
  TickConverter clock_;
  trace::TraceWriter writer_;
  std::vector<uint8_t> staging_;
  std::atomic<uint64_t> external_dropped_{0};
  uint64_t retired_dropped_ = 0;
  uint64_t last_reported_dropped_ = 0;
  bool warned_write_failure_ = false;

  std::thread flush_thread_;
  // Held by the flush thread while it drains (it allocates and writes then) and by a fork in
  // progress: fork() waits for the drain to end, so no lock of the flush thread's (the
  // allocator's included) is copied held into the child.
  std::timed_mutex drain_gate_;
  bool fork_holds_drain_gate_ = false;
  // What a forked child abandoned: the parent's buffers and pools, kept reachable, never used.
  std::vector<ThreadBuffer*> abandoned_buffers_;
  std::vector<BlockPool*> abandoned_pools_;
  std::mutex flush_mutex_;
  std::condition_variable flush_wakeup_;
  std::condition_variable flush_done_;
  bool stop_requested_ = false;
  bool flush_thread_running_ = false;  // start() returns once the new thread got this far
  uint64_t flush_requested_ = 0;
  uint64_t flush_completed_ = 0;

  CaptureWindowOptions window_options_;
  CaptureWindow window_;
  bool size_limit_reached_ = false;
  bool size_note_written_ = false;
  FlightOptions flight_options_;
  FlightRing ring_;
  CollectiveProgress collectives_;
  ProcessIdentity identity_;
  std::string start_metadata_;  // what start() was given (JSON object)
  uint64_t start_ns_ = 0;
  std::vector<std::vector<uint8_t>> drained_;                // per stream of a windowed drain
  std::vector<std::shared_ptr<DumpRequest>> dump_requests_;  // under flush_mutex_
  std::atomic<uint32_t> dumps_written_{0};
  TriggerHandler trigger_handler_ = nullptr;
  // Prepared for a fatal signal: the next dump's path and its file header with metadata.
  std::string crash_path_;
  std::string crash_prefix_;
};

// moescope_trigger() under the flight recorder: hands the trigger to the dump (true), or false
// when there is no flight recorder (the trigger is then only recorded).
bool flight_recorder_takes(const moescope_trigger_info* trigger);
// moescope_comm_op(): the collective completed (collective_progress.h).
void collective_completed(const moescope_comm_op_info* op);

// Writes a fixed-size record of type Record on the calling thread's buffer; returns a pointer
// to fill, or nullptr when the record is dropped. The caller must call commit_record.
template <typename Record>
inline Record* begin_record(ThreadBuffer* buffer, trace::RecordKind kind, uint32_t name,
                            uint32_t bytes = sizeof(Record)) {
  uint8_t* space = buffer->reserve(bytes);
  if (!space) return nullptr;
  std::memset(space, 0, bytes);
  auto* header = reinterpret_cast<trace::RecordHeader*>(space);
  header->kind = static_cast<uint8_t>(kind);
  header->size = static_cast<uint16_t>(bytes);
  header->name = name;
  return reinterpret_cast<Record*>(space);
}

}  // namespace moescope::recorder
