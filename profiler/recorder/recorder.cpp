#include "recorder.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>

#include "moescope/recorder.h"
#include "moescope/trace/recording_environment.h"
#include "trace_path.h"

namespace moescope::recorder {
namespace {

constexpr size_t kChunkRawBytes = 1u << 20;  // split drains into ~1 MB chunks

// How long fork() waits for the drain in progress. A drain takes milliseconds; only a stalled
// disk makes it longer, and then the fork goes ahead rather than hold up the program.
constexpr auto kForkWaitForDrain = std::chrono::seconds(2);

uint32_t env_number(const char* name, uint32_t fallback, uint32_t low, uint32_t high) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  unsigned long parsed = std::strtoul(value, &end, 10);
  if (!end || *end || parsed < low || parsed > high) {
    std::fprintf(stderr, "moescope: ignoring %s=%s (expected %u..%u)\n", name, value, low, high);
    return fallback;
  }
  return static_cast<uint32_t>(parsed);
}

// Marks the thread's buffer finished when the thread exits, so the flush thread can free it.
struct ThreadExitHook {
  ThreadBuffer* buffer = nullptr;
  ~ThreadExitHook() {
    if (buffer) buffer->mark_finished();
  }
};
thread_local ThreadExitHook t_exit_hook;

// What the header's metadata says about the window and the flight recorder.
nlohmann::json capture_settings_json(const CaptureWindowOptions& window,
                                     const FlightOptions& flight) {
  nlohmann::json out = nlohmann::json::object();
  if (window.any_window() || window.max_bytes) {
    nlohmann::json described = nlohmann::json::object();
    if (window.first_step >= 0) {
      described["first_step"] = window.first_step;
      described["last_step"] = window.last_step;
    }
    if (window.delay_ns) described["delay_s"] = window.delay_ns * 1e-9;
    if (window.duration_ns) described["duration_s"] = window.duration_ns * 1e-9;
    if (window.max_bytes) described["max_size_bytes"] = window.max_bytes;
    out["capture_window"] = described;
  }
  if (flight.enabled) {
    nlohmann::json described = {{"cap_bytes", flight.cap_bytes}};
    if (flight.window_ns) described["window_s"] = flight.window_ns * 1e-9;
    if (flight.window_steps) described["window_steps"] = flight.window_steps;
    out["flight_recorder"] = described;
  }
  return out;
}

}  // namespace

RecorderOptions RecorderOptions::from_environment() {
  RecorderOptions options;
  options.flush_interval_ms =
      env_number(trace::environment::kFlushMs, options.flush_interval_ms, 1, 200);
  options.max_buffer_bytes = size_t{env_number(trace::environment::kBufferMb, 256, 1, 1u << 16)}
                             << 20;
  return options;
}

Recorder::Recorder() {}

bool Recorder::start(const char* path_pattern, const char* metadata_json) {
  install_fork_handlers();
  std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
  if (active_) return true;
  options_ = RecorderOptions::from_environment();
  // One pool per process (buffers of an earlier recording may still hold blocks), but each
  // recording has its own budget: a second recording used to keep the first one's.
  const size_t max_blocks = options_.max_buffer_bytes / sizeof(Block) + 1;
  if (!pool_) {
    pool_ = new BlockPool(max_blocks);
  } else {
    pool_->set_max_blocks(max_blocks);
  }
  ProcessIdentity identity = current_process_identity();
  path_ = expand_trace_path(path_pattern ? path_pattern : "moescope.%p.moetrace", identity);
  clock_ = TickConverter();
  window_options_ = CaptureWindowOptions::from_environment();
  flight_options_ = FlightOptions::from_environment();
  identity_ = identity;
  {
    nlohmann::json given =
        nlohmann::json::parse(metadata_json ? metadata_json : "", nullptr, false);
    if (!given.is_object()) given = nlohmann::json::object();
    given.update(capture_settings_json(window_options_, flight_options_));
    start_metadata_ = given.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  start_ns_ = monotonic_ns();
  std::string metadata = build_metadata_json(identity, start_metadata_.c_str(), start_ns_);
  // Under the flight recorder nothing is written until a trigger: the file is made then.
  if (!flight_options_.enabled && !writer_.open(path_, metadata)) {
    std::fprintf(stderr, "moescope: not recording: %s\n", writer_.error().c_str());
    return false;
  }
  strings_.clear();
  {
    uint32_t step_end_name = strings_.intern("end");  // moescope_step_end's marker name
    window_.reset(window_options_, start_ns_, step_end_name);
    ring_.reset(flight_options_, step_end_name);
  }
  collectives_.reset();
  size_limit_reached_ = size_note_written_ = false;
  dumps_written_ = 0;
  if (flight_options_.enabled) prepare_crash_dump();
  {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    retire_threads();  // a thread may have registered while the last recording stopped
    next_stream_ = 1;
  }
  external_dropped_.store(0);
  retired_dropped_ = 0;
  last_reported_dropped_ = 0;
  warned_write_failure_ = false;
  stop_requested_ = false;
  flush_requested_ = flush_completed_ = 0;
  flush_thread_running_ = false;
  generation_.fetch_add(1, std::memory_order_relaxed);
  active_ = true;
  flush_thread_ = std::thread([this] { flush_loop(); });
  {
    // A new thread allocates while it starts (a sanitizer runtime's thread setup): a fork in
    // that window could copy an allocator lock held into the child. Returning only once the
    // thread runs closes the window before the program can fork.
    std::unique_lock<std::mutex> lock(flush_mutex_);
    flush_done_.wait_for(lock, std::chrono::seconds(1), [&] { return flush_thread_running_; });
  }
  moescope_recording = 1;
  return true;
}

void Recorder::stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mutex_);
  if (!active_) return;
  moescope_recording = 0;
  {
    std::lock_guard<std::mutex> lock(flush_mutex_);
    stop_requested_ = true;
  }
  flush_wakeup_.notify_all();
  if (flush_thread_.joinable()) flush_thread_.join();
  writer_.close();
  active_ = false;
}

void Recorder::flush() {
  std::unique_lock<std::mutex> lock(flush_mutex_);
  if (!active_ || stop_requested_) return;
  uint64_t ticket = ++flush_requested_;
  flush_wakeup_.notify_all();
  flush_done_.wait(lock, [&] { return flush_completed_ >= ticket || stop_requested_; });
}

void Recorder::abandon_after_fork() {
  // Only this thread exists in the child; the parent's locks may be held by threads that are
  // gone, so every lock-bearing member is rebuilt instead of used. Idempotent: the fork handler
  // calls it, and so may the shim's own handler after it.
  moescope_recording = 0;
  new (&lifecycle_mutex_) std::mutex;
  new (&threads_mutex_) std::mutex;
  new (&flush_mutex_) std::mutex;
  new (&flush_wakeup_) std::condition_variable;
  new (&flush_done_) std::condition_variable;
  new (&flush_thread_) std::thread;  // the parent's flush thread does not exist here
  // A collective completing on another thread may hold its mutex (its map is left behind).
  new (&collectives_) CollectiveProgress;
  if (!active_.load()) return;
  new (&strings_) StringTable;
  writer_.abandon();  // the file belongs to the parent; never flush its buffered bytes here
  // Buffers of parent threads and the pool (its mutex may be held) are kept, never touched.
  abandoned_buffers_.insert(abandoned_buffers_.end(), threads_.begin(), threads_.end());
  abandoned_buffers_.insert(abandoned_buffers_.end(), retired_.begin(), retired_.end());
  threads_.clear();
  retired_.clear();
  if (pool_) abandoned_pools_.push_back(pool_);
  pool_ = nullptr;  // a new recording makes a new pool
  t_buffer = nullptr;
  t_exit_hook.buffer = nullptr;
  active_ = false;
  generation_.fetch_add(1, std::memory_order_relaxed);
}

void Recorder::install_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto prepare = [] {
      Recorder& recorder = instance();
      recorder.fork_holds_drain_gate_ = recorder.drain_gate_.try_lock_for(kForkWaitForDrain);
    };
    auto in_parent = [] {
      Recorder& recorder = instance();
      if (recorder.fork_holds_drain_gate_) recorder.drain_gate_.unlock();
      recorder.fork_holds_drain_gate_ = false;
    };
    auto in_child = [] {
      Recorder& recorder = instance();
      if (recorder.fork_holds_drain_gate_) {
        recorder.drain_gate_.unlock();  // locked by this very thread, before the fork
      } else {
        new (&recorder.drain_gate_) std::timed_mutex;  // the wait timed out: held by a ghost
      }
      recorder.fork_holds_drain_gate_ = false;
      recorder.abandon_after_fork();
    };
    pthread_atfork(prepare, in_parent, in_child);
  });
}

void Recorder::rename_current_thread(const char* name) {
  ThreadBuffer* buffer = thread_buffer();
  if (!buffer || !name) return;
  uint32_t id = strings_.intern(name);
  auto* record = begin_record<trace::ThreadInfoRecord>(buffer, trace::RecordKind::kThreadInfo, id);
  if (!record) return;
  record->header.time = monotonic_ns();
  record->os_thread_id = static_cast<uint32_t>(syscall(SYS_gettid));
  buffer->commit(sizeof(trace::ThreadInfoRecord));
}

ThreadBuffer* Recorder::register_current_thread() {
  if (!active() || !pool_) return nullptr;
  uint64_t generation = generation_.load(std::memory_order_relaxed);
  if (t_buffer) t_buffer->mark_finished();  // the thread has left its old buffer for good
  ThreadBuffer* buffer;
  {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    buffer = new (std::nothrow) ThreadBuffer(*pool_, next_stream_++, generation);
    if (!buffer) return nullptr;
    threads_.push_back(buffer);
  }
  t_buffer = buffer;
  t_exit_hook.buffer = buffer;
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 || !name[0]) {
    std::snprintf(name, sizeof(name), "thread %ld", static_cast<long>(syscall(SYS_gettid)));
  }
  rename_current_thread(name);
  return buffer;
}

void Recorder::flush_loop() {
  pthread_setname_np(pthread_self(), "moescope-flush");
  std::unique_lock<std::mutex> lock(flush_mutex_);
  flush_thread_running_ = true;
  flush_done_.notify_all();
  for (;;) {
    flush_wakeup_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms),
                           [&] { return stop_requested_ || flush_requested_ > flush_completed_; });
    bool final = stop_requested_;
    uint64_t serving = flush_requested_;
    std::vector<std::shared_ptr<DumpRequest>> dumps;
    dumps.swap(dump_requests_);
    lock.unlock();
    {
      std::lock_guard<std::timed_mutex> gate(drain_gate_);
      drain_all(final);
      if (!dumps.empty()) write_dumps(dumps);
    }
    lock.lock();
    for (auto& request : dumps) request->done = true;
    flush_completed_ = serving;
    flush_done_.notify_all();
    if (final) return;
  }
}

void Recorder::convert_ticks(std::vector<uint8_t>& records, uint64_t& stream_last_ns) const {
  size_t offset = 0;
  while (offset + sizeof(trace::RecordHeader) <= records.size()) {
    auto* header = reinterpret_cast<trace::RecordHeader*>(records.data() + offset);
    if (header->flags & trace::kRecordRawTicks) {
      // In the thread's own order: a sync point moving the line back must not reorder them.
      header->time = clock_.to_ns_not_before(header->time, stream_last_ns);
      header->flags = 0;
    }
    offset += header->size;
  }
}

void Recorder::write_records(uint32_t stream, std::vector<uint8_t>& records,
                             trace::ChunkType type) {
  if (records.empty() && type == trace::ChunkType::kEvents) return;
  // Split at record boundaries into chunks of about kChunkRawBytes.
  size_t begin = 0;
  do {
    // --max-size: events stop at the first chunk past the limit (strings and the end still go).
    if (stream != 0 && window_options_.max_bytes &&
        writer_.bytes_written() >= window_options_.max_bytes) {
      size_limit_reached_ = true;
      return;
    }
    size_t end = begin;
    while (end < records.size() && end - begin < kChunkRawBytes) {
      end += reinterpret_cast<const trace::RecordHeader*>(records.data() + end)->size;
    }
    bool last = end >= records.size();
    trace::ChunkType chunk_type = last ? type : trace::ChunkType::kEvents;
    if (!writer_.write_chunk(stream, records.data() + begin, end - begin, chunk_type)) {
      warn_write_failure();
    }
    begin = end;
  } while (begin < records.size());
}

void Recorder::warn_write_failure() {
  if (warned_write_failure_) return;
  warned_write_failure_ = true;
  std::fprintf(stderr,
               "moescope: cannot write trace '%s' (%s); the program continues, events from now "
               "on may be lost\n",
               path_.c_str(), writer_.error().c_str());
}

void Recorder::append_stats(trace::RecordBuffer& out) {
  uint64_t dropped = retired_dropped_;
  {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    for (ThreadBuffer* buffer : threads_) dropped += buffer->dropped();
  }
  auto& stats = out.append<trace::StatsRecord>(trace::RecordKind::kStats, monotonic_ns());
  stats.dropped_events = dropped;
  stats.dropped_gpu_records = external_dropped_.load(std::memory_order_relaxed);
  stats.failed_writes = writer_.failed_writes();
  last_reported_dropped_ = dropped + stats.dropped_gpu_records;
}

void Recorder::retire_threads() {
  // Threads still alive keep their stale-generation buffers: never written to again, and not
  // freed under a thread that might still be inside a call. Freed once their thread exits.
  retired_.insert(retired_.end(), threads_.begin(), threads_.end());
  threads_.clear();
  std::erase_if(retired_, [](ThreadBuffer* buffer) {
    if (!buffer->finished()) return false;
    buffer->release_blocks();
    delete buffer;
    return true;
  });
}

void Recorder::drain_all(bool final) {
  clock_.add_sync_point();
  std::vector<ThreadBuffer*> snapshot;
  {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    snapshot = threads_;
  }
  std::vector<ThreadBuffer*> gone;
  if (window_options_.any_window() || flight_options_.enabled) {
    drain_windowed(snapshot, gone);
  } else {
    for (ThreadBuffer* buffer : snapshot) {
      bool finished = buffer->finished();  // read before draining: then nothing is left behind
      staging_.clear();
      buffer->drain(staging_);
      convert_ticks(staging_, buffer->last_tick_time_ns());
      write_records(buffer->stream(), staging_, trace::ChunkType::kEvents);
      if (finished) gone.push_back(buffer);
    }
  }
  // Strings after events: a string interned during this drain is still in this flush.
  trace::RecordBuffer meta;
  if (size_limit_reached_ && !size_note_written_) {
    size_note_written_ = true;
    std::string note = "moescope: --max-size " + std::to_string(window_options_.max_bytes) +
                       " bytes reached; no events recorded from here on";
    meta.append<trace::InstantRecord>(trace::RecordKind::kInstant, monotonic_ns(),
                                      strings_.intern(note));
    std::fprintf(stderr, "moescope: %s (%s)\n", note.c_str() + 10, path_.c_str());
  }
  // What a hung rank waits in: written while it waits (the collective's own record comes only
  // once it completed).
  trace::RecordBuffer long_open;
  collectives_.append_long_open(monotonic_ns(), kCollectiveOpenRecordNs, long_open);
  if (flight_options_.enabled) {
    ring_.append(0, long_open.bytes());
  } else {
    meta.bytes().insert(meta.bytes().end(), long_open.bytes().begin(), long_open.bytes().end());
  }
  strings_.take_pending(meta);
  if (flight_options_.enabled) {
    // Kept in memory; the statistics are written with each dump.
    ring_.append_strings(meta.bytes());
    meta.clear();
  }
  uint64_t dropped_now = external_dropped_.load(std::memory_order_relaxed) + retired_dropped_;
  for (ThreadBuffer* buffer : snapshot) dropped_now += buffer->dropped();
  if (!flight_options_.enabled) {
    if (final || dropped_now != last_reported_dropped_) append_stats(meta);
    write_records(0, meta.bytes(), final ? trace::ChunkType::kEnd : trace::ChunkType::kEvents);
    writer_.flush();
  }
  if (!gone.empty() || final) {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    for (ThreadBuffer* buffer : gone) {
      retired_dropped_ += buffer->dropped();
      std::erase(threads_, buffer);
      buffer->release_blocks();
      delete buffer;
    }
    if (final) retire_threads();
  }
}

}  // namespace moescope::recorder
