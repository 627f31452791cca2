#include "track_appender.h"

#include <algorithm>

namespace moescope::analysis {
namespace {

// Recorder stream ids and string ids are small numbers: direct tables up to here, maps above
// (crafted or damaged files).
constexpr uint32_t kDenseIds = 1u << 16;

}  // namespace

uint32_t TrackAppender::thread_of(uint32_t stream) {
  if (stream < thread_by_stream_.size() && thread_by_stream_[stream] != kNoIndex) {
    return thread_by_stream_[stream];
  }
  if (stream >= kDenseIds) {
    auto found = thread_by_large_stream_.find(stream);
    if (found != thread_by_large_stream_.end()) return found->second;
  }
  const uint32_t index = static_cast<uint32_t>(process_.threads.size());
  process_.threads.emplace_back();
  process_.threads.back().stream = stream;
  thread_state_.emplace_back();
  if (stream >= kDenseIds) {
    thread_by_large_stream_.emplace(stream, index);
  } else {
    if (stream >= thread_by_stream_.size()) thread_by_stream_.resize(stream + 1, kNoIndex);
    thread_by_stream_[stream] = index;
  }
  return index;
}

uint32_t TrackAppender::gpu_stream(uint32_t device, uint32_t stream) {
  // GPU records mostly repeat the previous record's stream.
  const uint64_t key = (uint64_t{device} << 32) | stream;
  if (key == last_gpu_key_ && last_gpu_index_ != kNoIndex) return last_gpu_index_;
  auto [found, inserted] =
      gpu_stream_index_.try_emplace(key, static_cast<uint32_t>(process_.gpu_streams.size()));
  if (inserted) {
    process_.gpu_streams.emplace_back();
    process_.gpu_streams.back().device = device;
    process_.gpu_streams.back().stream = stream;
    detail_by_name_.emplace_back();
    gpu_state_.emplace_back();
  }
  last_gpu_key_ = key;
  last_gpu_index_ = found->second;
  return found->second;
}

uint32_t TrackAppender::communicator(uint64_t comm_id) {
  if (comm_id != last_comm_id_ || last_comm_index_ == kNoIndex) {
    auto [found, inserted] =
        comm_index_.try_emplace(comm_id, static_cast<uint32_t>(process_.communicators.size()));
    if (inserted) {
      process_.communicators.emplace_back();
      process_.communicators.back().comm_id = comm_id;
      comm_state_.emplace_back();
    }
    last_comm_id_ = comm_id;
    last_comm_index_ = found->second;
  }
  return last_comm_index_;
}

uint32_t TrackAppender::counter(uint32_t name) {
  uint32_t index = kNoIndex;
  if (name < kDenseIds) {
    if (name >= counter_by_name_.size()) counter_by_name_.resize(name + 1, kNoIndex);
    index = counter_by_name_[name];
  } else {
    auto found = counter_by_large_name_.find(name);
    if (found != counter_by_large_name_.end()) index = found->second;
  }
  if (index != kNoIndex) return index;
  index = static_cast<uint32_t>(process_.counters.size());
  process_.counters.emplace_back();
  process_.counters.back().name = name;
  counter_state_.emplace_back();
  if (name < kDenseIds) {
    counter_by_name_[name] = index;
  } else {
    counter_by_large_name_.emplace(name, index);
  }
  return index;
}

uint32_t TrackAppender::begin_span(uint32_t t, Span span, bool paired) {
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

void TrackAppender::end_span(uint32_t t, TimeNs time) {
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

void TrackAppender::close_span(uint32_t t, uint32_t index, TimeNs time) {
  Span& span = process_.threads[t].spans[index];
  span.end = std::max(span.start, time);
  cover(span.start, span.end);
}

void TrackAppender::add_instant(uint32_t t, const Instant& instant) {
  ThreadState& state = thread_state_[t];
  if (instant.time < state.last_instant) state.in_order = false;
  state.last_instant = instant.time;
  process_.threads[t].instants.push_back(instant);
  cover(instant.time, instant.time);
  touch(t, instant.time);
}

void TrackAppender::add_api_call(uint32_t t, const ApiCall& call) {
  ThreadState& state = thread_state_[t];
  CpuThreadTrack& thread = process_.threads[t];
  if (call.start < state.last_call) state.in_order = false;
  state.last_call = call.start;
  remember_call(call.correlation_id, t, static_cast<uint32_t>(thread.api_calls.size()));
  thread.api_calls.push_back(call);
  cover(call.start, call.end);
  touch(t, call.end);
}

void TrackAppender::add_counter_sample(uint32_t name, TimeNs time, double value) {
  const uint32_t index = counter(name);
  CounterState& state = counter_state_[index];
  if (time < state.last_time) state.in_order = false;
  state.last_time = time;
  CounterTrack& track = process_.counters[index];
  track.times.push_back(time);
  track.values.push_back(value);
  cover(time, time);
}

uint32_t TrackAppender::kernel_detail(uint32_t stream, uint32_t name, const KernelDetail& detail) {
  // Launch configurations repeat: a kernel whose configuration equals one of the last few of
  // the same name on the same stream shares its entry (36 bytes less per kernel).
  auto& details = process_.gpu_streams[stream].kernel_details;
  auto& by_name = detail_by_name_[stream];
  if (name < kDenseIds) {
    if (name >= by_name.size()) by_name.resize(name + 1);
    RecentDetails& recent = by_name[name];
    for (uint32_t index : recent.index) {
      if (index != kNoIndex && details[index] == detail) return index;
    }
    recent.index[recent.next] = static_cast<uint32_t>(details.size());
    recent.next = (recent.next + 1) % RecentDetails::kCount;
  }
  details.push_back(detail);
  return static_cast<uint32_t>(details.size() - 1);
}

void TrackAppender::add_gpu_op(uint32_t stream, GpuOp op) {
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

void TrackAppender::add_comm_op(uint32_t communicator, const CommOp& op) {
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

void TrackAppender::remember_call(uint32_t correlation, uint32_t thread, uint32_t call) {
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

bool TrackAppender::link_launch(GpuOp& op) const {
  if (op.correlation_id < correlation_base_) return false;
  const uint64_t slot = uint64_t{op.correlation_id} - correlation_base_;
  if (slot >= call_by_correlation_.size() || call_by_correlation_[slot] == 0) return false;
  op.launch_thread = static_cast<uint32_t>(call_by_correlation_[slot] >> 32) - 1;
  op.launch_call = static_cast<uint32_t>(call_by_correlation_[slot]);
  return true;
}

void TrackAppender::reserve_projected(uint64_t bytes_read, uint64_t file_bytes) {
  // Traces repeat steps, so the mix of records is about the same throughout: the arrays then
  // grow in place instead of doubling (each page touched once, no copies). A short projection
  // falls back to doubling; a long one costs address space, not memory (untouched pages are
  // never faulted in).
  if (bytes_read == 0 || bytes_read >= file_bytes) return;
  const double scale = 1.1 * double(file_bytes) / double(bytes_read);
  auto grow = [scale](auto& items) {
    const size_t wanted = static_cast<size_t>(double(items.size()) * scale);
    if (wanted > items.capacity()) items.reserve(wanted);
  };
  for (auto& thread : process_.threads) {
    grow(thread.spans);
    grow(thread.instants);
    grow(thread.api_calls);
    for (auto& depth : thread.spans_by_depth) grow(depth);
  }
  for (auto& stream : process_.gpu_streams) {
    grow(stream.ops);
    grow(stream.max_end);
    grow(stream.kernel_details);
  }
  for (auto& comm : process_.communicators) {
    grow(comm.ops);
    grow(comm.max_end);
    grow(comm.split_bytes);
  }
  for (auto& counter : process_.counters) {
    grow(counter.times);
    grow(counter.values);
  }
  grow(process_.memory_events);
  grow(process_.step_markers);
  grow(out_.expert_loads);
  grow(out_.expert_tokens);
  grow(out_.expert_values);
  grow(out_.expert_value_data);
  grow(out_.layer_stats);
}

void TrackAppender::finish(const std::vector<std::pair<uint32_t, uint32_t>>& open_ranges) {
  TimeNs process_last = 0;
  for (const auto& thread : process_.threads)
    process_last = std::max(process_last, thread.last_time);
  for (size_t t = 0; t < thread_state_.size(); ++t) {
    CpuThreadTrack& thread = process_.threads[t];
    for (uint32_t index : thread_state_[t].open_spans) {
      Span& span = thread.spans[index];
      span.end = std::max(span.start, thread.last_time);
      span.flags |= kSpanUnclosed;
      if (span.end == span.start) thread_state_[t].nested = false;
      cover(span.start, span.end);
      ++process_.unclosed_spans;
    }
  }
  for (const auto& [thread, index] : open_ranges) {
    close_span(thread, index, process_last);
    process_.threads[thread].spans[index].flags |= kSpanUnclosed;
    ++process_.unclosed_spans;
  }
  if (links_usable_) {
    for (const auto& [stream, op] : unlinked_ops_)
      link_launch(process_.gpu_streams[stream].ops[op]);
  }
  ReadTimeIndex& index = out_.read_index;
  bool calls_in_order = true;
  for (const ThreadState& state : thread_state_) {
    index.thread_ready.push_back(state.nested && state.in_order);
    calls_in_order = calls_in_order && state.in_order;
  }
  for (const OpsState& state : gpu_state_) index.gpu_stream_ready.push_back(state.in_order);
  for (const OpsState& state : comm_state_) index.communicator_ready.push_back(state.in_order);
  for (const CounterState& state : counter_state_) index.counter_sorted.push_back(state.in_order);
  // Sorting a thread's API calls would move the calls the links point at.
  index.launches_linked = links_usable_ && calls_in_order;
  index.have_range = true;
  index.begin = begin_ <= end_ ? begin_ : 0;
  index.end = begin_ <= end_ ? end_ : 0;
  index.max_name = max_name_;
  index.made_up_names_only_on_gpu_ops = true;
}

}  // namespace moescope::analysis
