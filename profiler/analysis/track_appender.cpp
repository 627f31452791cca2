#include "track_appender.h"

#include <algorithm>

namespace moescope::analysis {
namespace {

// Recorder stream ids and string ids are small numbers: direct tables up to here, maps above
// (crafted or damaged files).
constexpr uint32_t kDenseIds = 1u << 16;

// Arrays up to this size come from the malloc heap (glibc's mmap threshold starts at 128 KiB
// and rises to 32 MiB as large blocks are freed).
constexpr size_t kHeapArrayBytes = size_t(1) << 20;

// Every array of a process's tracks that grows with the events: reserved ahead by
// reserve_projected, trimmed by finish.
template <typename Visit>
void for_each_track_array(ProcessTrack& process, Visit&& visit) {
  for (auto& thread : process.threads) {
    visit(thread.spans);
    visit(thread.instants);
    visit(thread.api_calls);
    for (auto& depth : thread.spans_by_depth) visit(depth);
  }
  for (auto& stream : process.gpu_streams) {
    visit(stream.ops);
    visit(stream.max_end);
    visit(stream.kernel_details);
  }
  for (auto& comm : process.communicators) {
    visit(comm.ops);
    visit(comm.max_end);
    visit(comm.split_bytes);
  }
  for (auto& counter : process.counters) {
    visit(counter.times);
    visit(counter.values);
  }
  for_each_process_event_array([&](const auto& array) { visit(process.*array.events); });
}

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
  for_each_track_array(process_, grow);
  for_each_sample_array([&](const auto& array) {
    grow(out_.*array.samples);
    if constexpr (std::decay_t<decltype(array)>::kHasTail) grow(out_.*array.tail);
  });
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
  // The tracks move into the model and stay for the whole session. An array small enough to
  // live in the malloc heap holds its unused capacity on pages other allocations touched: give
  // it back now (a file of a 4,096-rank job had a third of its heap so). A large array is its
  // own mapping whose unused tail was never touched: copying it would cost time and memory.
  for_each_track_array(process_, [](auto& items) {
    const size_t unused = items.capacity() - items.size();
    if (items.capacity() * sizeof(items[0]) <= kHeapArrayBytes && unused > items.size() / 16) {
      items.shrink_to_fit();
    }
  });
}

}  // namespace moescope::analysis
