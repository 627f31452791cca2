// Appends one file's events to the tracks of its ProcessTrack and keeps, as it goes, what
// finalize_process would otherwise compute in passes over the finished (cache-cold) arrays:
// span nesting, order checks, running max ends, launch links and the process time range (see
// ReadTimeIndex). Reading is where the data is in cache; each later pass over a 10 M-event
// model costs tens of milliseconds. Internal to the analysis library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "file_load.h"

namespace moescope::analysis {

class TrackAppender {
 public:
  explicit TrackAppender(FileLoad& out) : out_(out), process_(out.process) {}

  // Track indices, created on first use.
  uint32_t thread_of(uint32_t stream);
  uint32_t gpu_stream(uint32_t device, uint32_t stream);
  uint32_t communicator(uint64_t comm_id);

  // A span starts on `thread`: a begin/end pair when `paired` (closed by end_span), else a
  // complete span or a range (closed by close_span). Returns its index in the thread's spans.
  uint32_t begin_span(uint32_t thread, Span span, bool paired);
  // Closes the innermost open paired span of `thread` at `time`.
  void end_span(uint32_t thread, TimeNs time);
  // Ends span `index` of `thread` at `time` (a range end, possibly read on another thread).
  void close_span(uint32_t thread, uint32_t index, TimeNs time);
  void add_instant(uint32_t thread, const Instant& instant);
  void add_api_call(uint32_t thread, const ApiCall& call);
  void add_counter_sample(uint32_t name, TimeNs time, double value);
  // The launch configuration's index in the stream's kernel_details (shared when it repeats).
  uint32_t kernel_detail(uint32_t stream, uint32_t name, const KernelDetail& detail);
  void add_gpu_op(uint32_t stream, GpuOp op);
  // `op.split_offset`/`num_splits` must already point at its rows in split_bytes.
  void add_comm_op(uint32_t communicator, const CommOp& op);
  // Any other event with a time (memory, steps, expert samples): widens the process range.
  void cover(TimeNs start, TimeNs end) {
    begin_ = start < begin_ ? start : begin_;
    end_ = end > end_ ? end : end_;
  }
  // The thread did something at `time` (its last_time closes spans left open).
  void touch(uint32_t thread, TimeNs time) {
    TimeNs& last = process_.threads[thread].last_time;
    if (time > last) last = time;
  }
  // Largest file string id used by an event so far.
  void use_name(uint32_t id) { max_name_ = id > max_name_ ? id : max_name_; }

  // Reserves every growing array for the whole file, projected from the share read so far.
  void reserve_projected(uint64_t bytes_read, uint64_t file_bytes);
  // Closes paired spans still open at their thread's last time and the spans listed in
  // `open_ranges` (thread, index) at the process's last time; links GPU work read before its
  // launch; fills out.read_index.
  void finish(const std::vector<std::pair<uint32_t, uint32_t>>& open_ranges);

 private:
  struct ThreadState {
    std::vector<uint32_t> open_spans;  // indices of open paired spans, innermost last
    TimeNs last_span_time = INT64_MIN;
    TimeNs last_call = INT64_MIN, last_instant = INT64_MIN;
    // Parent, depth and spans_by_depth as set by begin_span equal what build_nesting computes
    // while every span is a begin/end pair, times never go back and no span has zero length
    // (the cases where sorting by (start, longest first) would reorder or re-nest spans).
    bool nested = true;
    bool in_order = true;  // instants and API calls in time order
  };
  struct OpsState {  // a GPU stream or a communicator
    TimeNs last_start = INT64_MIN;
    TimeNs max_end = INT64_MIN;
    bool in_order = true;
  };
  struct CounterState {
    TimeNs last_time = INT64_MIN;
    bool in_order = true;
  };

  uint32_t counter(uint32_t name);
  void remember_call(uint32_t correlation, uint32_t thread, uint32_t call);
  // Points `op` at its launch. False when its call has not been read (yet).
  bool link_launch(GpuOp& op) const;

  FileLoad& out_;
  ProcessTrack& process_;
  std::vector<ThreadState> thread_state_;  // parallel to process_.threads
  std::vector<OpsState> gpu_state_;        // parallel to process_.gpu_streams
  std::vector<OpsState> comm_state_;       // parallel to process_.communicators
  std::vector<CounterState> counter_state_;
  std::vector<uint32_t> thread_by_stream_;
  std::unordered_map<uint32_t, uint32_t> thread_by_large_stream_;
  std::unordered_map<uint64_t, uint32_t> gpu_stream_index_;
  std::unordered_map<uint64_t, uint32_t> comm_index_;
  uint64_t last_gpu_key_ = 0;
  uint32_t last_gpu_index_ = kNoIndex;
  uint64_t last_comm_id_ = 0;
  uint32_t last_comm_index_ = kNoIndex;
  std::vector<uint32_t> counter_by_name_;
  std::unordered_map<uint32_t, uint32_t> counter_by_large_name_;
  struct RecentDetails {  // a kernel name's last distinct launch configurations
    static constexpr uint32_t kCount = 4;
    uint32_t index[kCount] = {kNoIndex, kNoIndex, kNoIndex, kNoIndex};
    uint32_t next = 0;
  };
  std::vector<std::vector<RecentDetails>> detail_by_name_;  // per GPU stream, by kernel name
  // Launch links: API call by correlation id (ids are dense and increasing), as
  // (thread + 1) << 32 | call; 0 = none. Ids too sparse for a table leave it to finalize.
  std::vector<uint64_t> call_by_correlation_;
  uint32_t correlation_base_ = 0;
  uint64_t calls_seen_ = 0;
  bool links_usable_ = true;
  std::vector<std::pair<uint32_t, uint32_t>> unlinked_ops_;  // (GPU stream, op) read first
  TimeNs begin_ = INT64_MAX, end_ = INT64_MIN;
  uint32_t max_name_ = 0;
};

// The per-record functions, inline so the reader's switch over record kinds absorbs them.

inline uint32_t TrackAppender::begin_span(uint32_t t, Span span, bool paired) {
  CpuThreadTrack& thread = process_.threads[t];
  ThreadState& state = thread_state_[t];
  const uint32_t index = static_cast<uint32_t>(thread.spans.size());
  if (!paired || span.start < state.last_span_time) state.nested = false;
  state.last_span_time = std::max(state.last_span_time, span.start);
  if (state.nested) {
    const size_t depth = state.open_spans.size();
    span.parent = depth ? static_cast<int32_t>(state.open_spans.back()) : -1;
    span.depth = static_cast<uint16_t>(std::min<size_t>(depth, UINT16_MAX));
    if (thread.spans_by_depth.size() <= span.depth) thread.spans_by_depth.resize(span.depth + 1);
    thread.spans_by_depth[span.depth].push_back(index);
  }
  if (paired) state.open_spans.push_back(index);
  thread.spans.push_back(span);
  cover(span.start, span.end);
  touch(t, span.end);
  return index;
}

inline void TrackAppender::end_span(uint32_t t, TimeNs time) {
  CpuThreadTrack& thread = process_.threads[t];
  ThreadState& state = thread_state_[t];
  touch(t, time);
  if (time < state.last_span_time) state.nested = false;
  state.last_span_time = std::max(state.last_span_time, time);
  if (state.open_spans.empty()) {
    ++process_.unmatched_span_ends;
    return;
  }
  Span& span = thread.spans[state.open_spans.back()];
  span.end = std::max(span.start, time);
  if (span.end == span.start) state.nested = false;
  cover(span.start, span.end);
  state.open_spans.pop_back();
}

inline void TrackAppender::close_span(uint32_t t, uint32_t index, TimeNs time) {
  Span& span = process_.threads[t].spans[index];
  span.end = std::max(span.start, time);
  cover(span.start, span.end);
}

inline void TrackAppender::add_instant(uint32_t t, const Instant& instant) {
  ThreadState& state = thread_state_[t];
  if (instant.time < state.last_instant) state.in_order = false;
  state.last_instant = instant.time;
  process_.threads[t].instants.push_back(instant);
  cover(instant.time, instant.time);
  touch(t, instant.time);
}

inline void TrackAppender::add_api_call(uint32_t t, const ApiCall& call) {
  ThreadState& state = thread_state_[t];
  CpuThreadTrack& thread = process_.threads[t];
  if (call.start < state.last_call) state.in_order = false;
  state.last_call = call.start;
  remember_call(call.correlation_id, t, static_cast<uint32_t>(thread.api_calls.size()));
  thread.api_calls.push_back(call);
  cover(call.start, call.end);
  touch(t, call.end);
}

inline void TrackAppender::add_counter_sample(uint32_t name, TimeNs time, double value) {
  const uint32_t index = counter(name);
  CounterState& state = counter_state_[index];
  if (time < state.last_time) state.in_order = false;
  state.last_time = time;
  CounterTrack& track = process_.counters[index];
  track.times.push_back(time);
  track.values.push_back(value);
  cover(time, time);
}

inline void TrackAppender::add_gpu_op(uint32_t stream, GpuOp op) {
  GpuStreamTrack& track = process_.gpu_streams[stream];
  OpsState& state = gpu_state_[stream];
  if (op.kind != GpuOpKind::kSync && op.correlation_id && links_usable_ && !link_launch(op)) {
    unlinked_ops_.push_back({stream, static_cast<uint32_t>(track.ops.size())});
  }
  if (op.start < state.last_start) state.in_order = false;
  state.last_start = op.start;
  state.max_end = std::max(state.max_end, op.end);
  track.ops.push_back(op);
  track.max_end.push_back(state.max_end);
  cover(op.start, op.end);
}

inline void TrackAppender::add_comm_op(uint32_t communicator, const CommOp& op) {
  CommunicatorTrack& track = process_.communicators[communicator];
  OpsState& state = comm_state_[communicator];
  if (op.start < state.last_start) state.in_order = false;
  state.last_start = op.start;
  state.max_end = std::max(state.max_end, op.end);
  track.num_ranks = std::max(track.num_ranks, op.num_ranks);
  track.ops.push_back(op);
  track.max_end.push_back(state.max_end);
  cover(std::min(op.enqueue, op.start), op.end);
}

inline void TrackAppender::remember_call(uint32_t correlation, uint32_t thread, uint32_t call) {
  if (!correlation || !links_usable_) return;
  ++calls_seen_;
  if (call_by_correlation_.empty()) {
    correlation_base_ = correlation - std::min<uint32_t>(correlation, 4096);
  }
  if (correlation < correlation_base_) {
    links_usable_ = false;
    return;
  }
  const uint64_t slot = correlation - correlation_base_;
  if (slot >= call_by_correlation_.size()) {
    if (slot > 8 * calls_seen_ + (1u << 20)) {  // too sparse for a table
      links_usable_ = false;
      return;
    }
    call_by_correlation_.resize(slot + 1, 0);
  }
  call_by_correlation_[slot] = (uint64_t{thread} + 1) << 32 | call;
}

inline bool TrackAppender::link_launch(GpuOp& op) const {
  if (op.correlation_id < correlation_base_) return false;
  const uint64_t slot = uint64_t{op.correlation_id} - correlation_base_;
  if (slot >= call_by_correlation_.size() || call_by_correlation_[slot] == 0) return false;
  op.launch_thread = static_cast<uint32_t>(call_by_correlation_[slot] >> 32) - 1;
  op.launch_call = static_cast<uint32_t>(call_by_correlation_[slot]);
  return true;
}

}  // namespace moescope::analysis
