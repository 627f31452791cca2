#include "nccl_completion_tracker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <new>

namespace moescope::inject {

NcclCompletionTracker::Reference::~Reference() {
  if (events && event) events->destroy_event(device, event);
}

NcclCompletionTracker::NcclCompletionTracker(GpuEventApi& events, Clock host_clock, Emit emit,
                                             Options options)
    : events_(events),
      host_clock_(std::move(host_clock)),
      emit_(std::move(emit)),
      options_(options) {}

NcclCompletionTracker::~NcclCompletionTracker() {
  stop_poller();
  drain();
}

bool NcclCompletionTracker::usable() {
  return events_.usable();
}

std::shared_ptr<NcclCompletionTracker::Reference> NcclCompletionTracker::reference_for(
    int device, bool may_create) {
  if (device < 0) return nullptr;
  if (references_.size() <= static_cast<size_t>(device)) references_.resize(device + 1);
  std::shared_ptr<Reference>& current = references_[device];
  uint64_t now = host_clock_();
  if (current && now - current->created_ns < options_.reference_lifetime_ns) return current;
  // Making one synchronizes: never on the application thread (a CUDA graph may be being
  // captured there or elsewhere), only in poll().
  if (!may_create) return nullptr;

  auto reference = std::make_shared<Reference>();
  reference->events = &events_;
  reference->device = device;
  reference->event = events_.create_event(device);
  GpuEventApi::Stream idle = events_.idle_stream(device);
  if (!reference->event || !idle) return nullptr;
  uint64_t before = host_clock_();
  if (!events_.record(reference->event, idle) || !events_.synchronize(reference->event)) {
    return nullptr;
  }
  uint64_t after = host_clock_();
  reference->host_ns = before + (after - before) / 2;
  reference->created_ns = after;
  current = reference;
  return current;
}

GpuEventApi::Event NcclCompletionTracker::take_event(int device) {
  if (free_events_.size() > static_cast<size_t>(device)) {
    auto& free_list = free_events_[device];
    if (!free_list.empty()) {
      GpuEventApi::Event event = free_list.back();
      free_list.pop_back();
      return event;
    }
  }
  return events_.create_event(device);
}

void NcclCompletionTracker::give_back(Mark& mark) {
  if (!mark.event) return;
  if (free_events_.size() <= static_cast<size_t>(mark.device)) {
    free_events_.resize(mark.device + 1);
  }
  free_events_[mark.device].push_back(mark.event);
  mark.event = nullptr;
  mark.reference.reset();
}

NcclCompletionTracker::Mark NcclCompletionTracker::mark(int device, GpuEventApi::Stream stream) {
  Mark mark;
  if (device < 0 || !events_.usable()) return mark;
  // The application's thread: nothing here may break a CUDA graph being captured, on this
  // thread or (global mode) on another one.
  ScopedRelaxedCaptureMode relaxed(events_);
  if (events_.stream_capturing(stream)) {
    mark.captured = true;  // an event would become part of the user's graph
    return mark;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // The current reference when there is one; else the poller takes one after the op completed.
  std::shared_ptr<Reference> reference = reference_for(device, /*may_create=*/false);
  GpuEventApi::Event event = take_event(device);
  if (!event) return mark;
  mark.device = device;
  mark.stream = stream;
  mark.event = event;
  if (!events_.record(event, stream)) {
    give_back(mark);
    return Mark();
  }
  mark.reference = std::move(reference);
  return mark;
}

void NcclCompletionTracker::submit(std::vector<NcclOpRecord> ops, Mark start, Mark end) {
  // Ops that wait for the GPU are reported entered before they are pending, so that the
  // poller's completion always comes after (ops written at once, with no end event, are not;
  // with the queue full, entered is followed by their completion at once).
  if (end.valid()) {
    for (const NcclOpRecord& op : ops) {
      if (options_.entered) {
        options_.entered(op.info);
      } else {
        moescope_comm_op_enter(&op.info);
      }
    }
  }
  PendingOp pending{std::move(ops), std::move(start), std::move(end)};
  bool emit_now = false;
  bool note_full = false;
  bool note_captured = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending.end.captured && !graph_capture_noted_) {
      graph_capture_noted_ = true;
      note_captured = true;
    }
    const bool full = pending_.size() >= options_.max_pending;
    if (!pending.end.valid() || full) {
      give_back(pending.start);
      give_back(pending.end);
      emit_now = true;
      note_full = full && !queue_full_noted_;
      queue_full_noted_ = queue_full_noted_ || full;
    } else {
      pending_.push_back(std::move(pending));
    }
  }
  if (note_captured) {
    write_note(
        "NCCL ops captured into a CUDA graph: recorded once, at capture, without GPU times; "
        "their graph replays are not recorded as comm ops (their kernels are, through CUPTI)");
  }
  if (note_full) {
    write_note(std::to_string(options_.max_pending) +
               " NCCL ops wait for the GPU (the program does not synchronize?): later ops are "
               "written without GPU times until the queue drains");
  }
  if (emit_now) emit_resolved(pending, false);
}

void NcclCompletionTracker::write_note(const std::string& text) {
  if (options_.note) {
    options_.note(text);
  } else {
    moescope_instant(moescope_intern("NCCL"), moescope_intern(text.c_str()));
  }
}

uint64_t NcclCompletionTracker::host_time_of(const Mark& mark) {
  if (!mark.valid()) return 0;
  float milliseconds = 0;
  double host_ns = 0;
  if (mark.reference) {  // recorded before the mark
    if (!events_.elapsed_ms(mark.reference->event, mark.event, &milliseconds)) return 0;
    host_ns =
        static_cast<double>(mark.reference->host_ns) + static_cast<double>(milliseconds) * 1e6;
  } else {
    // No reference when the op was issued: the device's current one, which poll() took after
    // the mark completed, so the elapsed time runs from the mark to it.
    std::shared_ptr<Reference> later;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (mark.device >= 0 && references_.size() > static_cast<size_t>(mark.device)) {
        later = references_[mark.device];
      }
    }
    if (!later || !events_.elapsed_ms(mark.event, later->event, &milliseconds)) return 0;
    host_ns = static_cast<double>(later->host_ns) - static_cast<double>(milliseconds) * 1e6;
  }
  return host_ns > 0 ? static_cast<uint64_t>(host_ns) : 0;
}

void NcclCompletionTracker::emit_resolved(PendingOp& pending, bool completed) {
  uint64_t start = 0;
  uint64_t end = 0;
  if (completed) {
    end = host_time_of(pending.end);
    start = end ? host_time_of(pending.start) : 0;
    if (!start || start > end) start = end;
  }
  for (NcclOpRecord& op : pending.ops) {
    moescope_comm_op_info& info = op.info;
    info.start_ns = end ? start : info.enqueue_ns;
    info.end_ns = end;
    info.split_bytes = op.split_bytes.empty() ? nullptr : op.split_bytes.data();
    info.num_splits = static_cast<uint32_t>(op.split_bytes.size());
    if (emit_) emit_(op);
  }
}

size_t NcclCompletionTracker::poll() {
  std::vector<std::pair<PendingOp, bool>> ready;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // A fresh reference for every device with ops waiting (made here, on the poller's thread,
    // never where the program issues ops): ops whose end completed before it are measured
    // back from it, later ops forward.
    for (const PendingOp& pending : pending_) {
      if (pending.end.device >= 0) reference_for(pending.end.device, /*may_create=*/true);
    }
    // Events on one stream complete in submission order: after the first one still pending,
    // the later ones on its stream are not queried (one query per stream for a long queue).
    std::vector<std::pair<int, GpuEventApi::Stream>> blocked_streams;
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      const Mark& end = pending_[i].end;
      const std::pair<int, GpuEventApi::Stream> stream{end.device, end.stream};
      const bool blocked = std::find(blocked_streams.begin(), blocked_streams.end(), stream) !=
                           blocked_streams.end();
      GpuEventState state = blocked ? GpuEventState::kPending : events_.query(end.event);
      if (state == GpuEventState::kPending) {
        if (!blocked) blocked_streams.push_back(stream);
        if (kept != i) pending_[kept] = std::move(pending_[i]);
        ++kept;
        continue;
      }
      ready.emplace_back(std::move(pending_[i]), state == GpuEventState::kDone);
    }
    pending_.resize(kept);
    if (queue_full_noted_ && pending_.size() <= options_.max_pending / 2) {
      queue_full_noted_ = false;
    }
  }
  for (auto& [op, completed] : ready) emit_resolved(op, completed);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [op, completed] : ready) {
    give_back(op.start);
    give_back(op.end);
  }
  return ready.size();
}

void NcclCompletionTracker::drain() {
  poll();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    graph_capture_noted_ = false;  // noted again in the next recording
  }
  std::vector<PendingOp> remaining;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    remaining.swap(pending_);
  }
  size_t unfinished = 0;
  for (PendingOp& op : remaining) {
    emit_resolved(op, false);
    unfinished += op.ops.size();
    // Still in flight on the GPU: destroyed, not reused (CUDA frees it once it completes).
    events_.destroy_event(op.start.device, op.start.event);
    events_.destroy_event(op.end.device, op.end.event);
  }
  if (unfinished > 0) {
    write_note(std::to_string(unfinished) +
               " NCCL ops had not finished on the GPU when the recording stopped: written with "
               "end = 0");
  }
}

size_t NcclCompletionTracker::abort_comm(uint64_t comm_id, const char* call_name) {
  std::vector<PendingOp> aborted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto on_comm = [comm_id](const PendingOp& pending) {
      return std::any_of(pending.ops.begin(), pending.ops.end(),
                         [comm_id](const NcclOpRecord& op) { return op.info.comm_id == comm_id; });
    };
    auto first = std::stable_partition(pending_.begin(), pending_.end(),
                                       [&](const PendingOp& pending) { return !on_comm(pending); });
    std::move(first, pending_.end(), std::back_inserter(aborted));
    pending_.erase(first, pending_.end());
  }
  size_t ops = 0;
  for (PendingOp& pending : aborted) {
    // Not queried, not destroyed: the events sit behind the aborted communicator's kernels.
    pending.start.event = nullptr;
    pending.end.event = nullptr;
    emit_resolved(pending, false);
    ops += pending.ops.size();
  }
  if (ops > 0) {
    char id[32];
    std::snprintf(id, sizeof(id), "%016llx", static_cast<unsigned long long>(comm_id));
    write_note(std::string(call_name ? call_name : "ncclCommAbort") + ": " + std::to_string(ops) +
               " NCCL ops of communicator " + id +
               " had not finished on the GPU: written as aborted (end = 0)");
  }
  return ops;
}

size_t NcclCompletionTracker::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

void NcclCompletionTracker::start_poller() {
  std::lock_guard<std::mutex> lock(poller_mutex_);
  if (poller_.joinable()) return;
  stop_poller_ = false;
  poller_ = std::thread([this] { poller_loop(); });
}

void NcclCompletionTracker::stop_poller() {
  std::thread poller;
  {
    std::lock_guard<std::mutex> lock(poller_mutex_);
    stop_poller_ = true;
    poller = std::move(poller_);
  }
  poller_wakeup_.notify_all();
  if (poller.joinable()) poller.join();
}

bool NcclCompletionTracker::poller_running() {
  std::lock_guard<std::mutex> lock(poller_mutex_);
  return poller_.joinable();
}

void NcclCompletionTracker::abandon_after_fork() {
  if (poller_.joinable()) new std::thread(std::move(poller_));  // the parent's: leaked on purpose
  new (&mutex_) std::mutex();
  new (&poller_mutex_) std::mutex();
  // Their events belong to the parent's CUDA context: leaked, never destroyed from the child.
  new std::vector<PendingOp>(std::move(pending_));
  new std::vector<std::shared_ptr<Reference>>(std::move(references_));
  pending_.clear();
  references_.clear();
  free_events_.clear();
}

void NcclCompletionTracker::poller_loop() {
  events_.relax_capture_mode_for_this_thread();
  bool device_chosen = false;
  std::unique_lock<std::mutex> lock(poller_mutex_);
  while (!stop_poller_) {
    poller_wakeup_.wait_for(lock, std::chrono::milliseconds(options_.poll_interval_ms));
    if (stop_poller_) break;
    lock.unlock();
    if (!device_chosen) {
      // Make the ops' device current first: a CUDA call on a fresh thread would otherwise
      // create a context on device 0, costing memory on a GPU this rank does not use.
      int device = -1;
      {
        std::lock_guard<std::mutex> pending_lock(mutex_);
        if (!pending_.empty()) device = pending_.front().end.device;
      }
      if (device >= 0) device_chosen = events_.set_device(device);
    }
    if (device_chosen) poll();
    lock.lock();
  }
}

void NcclPollerGate::start_for(uint64_t recording) {
  // Busy: another op is starting the poller or the capture is stopping. The op does not wait;
  // the next one looks again.
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || handled_for_.load(std::memory_order_relaxed) == recording) return;
  if (tracker_.usable()) tracker_.start_poller();
  handled_for_.store(recording, std::memory_order_relaxed);
}

void NcclPollerGate::shut_down(uint64_t recording) {
  std::lock_guard<std::mutex> lock(mutex_);
  handled_for_.store(recording, std::memory_order_relaxed);
  tracker_.stop_poller();
  tracker_.drain();
}

void NcclPollerGate::after_fork_in_child() {
  new (&mutex_) std::mutex();  // the parent's holder does not exist here
  handled_for_.store(0, std::memory_order_relaxed);
}

}  // namespace moescope::inject
