// Sorting and indexing of one process's tracks after reading, and the time shift used by clock
// alignment. Sorting is skipped when a track is already in order (the common case).
#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "file_load.h"

namespace moescope::analysis {
namespace {

template <typename Item, typename Less>
void sort_if_needed(std::vector<Item>& items, Less less) {
  if (!std::is_sorted(items.begin(), items.end(), less)) {
    std::stable_sort(items.begin(), items.end(), less);
  }
}

template <typename Item>
void build_max_end(const std::vector<Item>& items, std::vector<TimeNs>& max_end) {
  max_end.resize(items.size());
  TimeNs running = INT64_MIN;
  for (size_t i = 0; i < items.size(); ++i) {
    running = std::max(running, items[i].end);
    max_end[i] = running;
  }
}

// Parents and depths from start order: a span is the child of the innermost earlier span that
// has not ended when it starts. Spans that start together nest longest-first.
void build_nesting(CpuThreadTrack& thread) {
  auto& spans = thread.spans;
  sort_if_needed(spans, [](const Span& a, const Span& b) {
    return a.start != b.start ? a.start < b.start : a.end > b.end;
  });
  std::vector<uint32_t> stack;
  thread.spans_by_depth.clear();
  for (uint32_t i = 0; i < spans.size(); ++i) {
    Span& span = spans[i];
    // Pop what ended before this span starts; a span starting together with the top is inside
    // it (the sort put the longer one first), even when both have zero length.
    while (!stack.empty() && spans[stack.back()].end <= span.start &&
           spans[stack.back()].start < span.start) {
      stack.pop_back();
    }
    // A span that ends after the span it starts in (overlapping ranges) is still drawn below it.
    span.parent = stack.empty() ? -1 : static_cast<int32_t>(stack.back());
    span.depth = static_cast<uint16_t>(std::min<size_t>(stack.size(), UINT16_MAX));
    if (thread.spans_by_depth.size() <= span.depth) thread.spans_by_depth.resize(span.depth + 1);
    thread.spans_by_depth[span.depth].push_back(i);
    stack.push_back(i);
  }
}

void build_memory_usage(ProcessTrack& process) {
  auto& events = process.memory_events;
  sort_if_needed(events,
                 [](const MemoryEvent& a, const MemoryEvent& b) { return a.time < b.time; });
  struct Live {
    int64_t bytes;
    uint16_t category;
  };
  std::unordered_map<uint64_t, Live> live;  // key: address ^ device in the top bits
  MemoryUsage& usage = process.memory_usage;
  usage = MemoryUsage();
  usage.times.reserve(events.size());
  usage.total.reserve(events.size());
  int64_t total = 0;
  int64_t by_category[kNumMemoryCategories] = {};
  for (auto& series : usage.by_category) series.reserve(events.size());
  for (MemoryEvent& event : events) {
    uint64_t key =
        event.address ^ (static_cast<uint64_t>(static_cast<uint32_t>(event.device)) << 48);
    if (event.is_free) {
      auto found = live.find(key);
      if (found != live.end()) {
        event.bytes = -found->second.bytes;
        event.category = found->second.category;
        live.erase(found);
      } else {
        event.unmatched = 1;
        event.bytes = 0;  // size unknown to us: leave the totals alone
      }
    } else {
      live[key] = {event.bytes, event.category};
    }
    total += event.bytes;
    by_category[event.category] += event.bytes;
    usage.times.push_back(event.time);
    usage.total.push_back(total);
    for (int c = 0; c < kNumMemoryCategories; ++c) usage.by_category[c].push_back(by_category[c]);
  }
}

// Launch links: each GPU op points at the API call with its correlation id.
void link_launches(ProcessTrack& process) {
  bool any_correlation = false;
  for (const auto& stream : process.gpu_streams) {
    for (const GpuOp& op : stream.ops) {
      if (op.correlation_id && op.kind != GpuOpKind::kSync) {
        any_correlation = true;
        break;
      }
    }
  }
  if (!any_correlation) return;
  // Correlation ids are mostly dense and increasing: a direct table when the range is small,
  // else a sorted list searched by binary search (no per-entry allocation either way).
  struct CallRef {
    uint32_t correlation, thread, call;
  };
  std::vector<CallRef> calls;
  uint32_t low = UINT32_MAX, high = 0;
  for (uint32_t t = 0; t < process.threads.size(); ++t) {
    const auto& api_calls = process.threads[t].api_calls;
    for (uint32_t i = 0; i < api_calls.size(); ++i) {
      uint32_t id = api_calls[i].correlation_id;
      if (!id) continue;
      calls.push_back({id, t, i});
      low = std::min(low, id);
      high = std::max(high, id);
    }
  }
  if (calls.empty()) return;
  const uint64_t range = uint64_t(high) - low + 1;
  std::vector<uint32_t> table;  // correlation - low -> index in calls + 1 (0 = none)
  const bool dense = range <= 4 * calls.size() + 1024;
  if (dense) {
    table.assign(range, 0);
    for (uint32_t i = 0; i < calls.size(); ++i) table[calls[i].correlation - low] = i + 1;
  } else {
    std::stable_sort(calls.begin(), calls.end(), [](const CallRef& a, const CallRef& b) {
      return a.correlation < b.correlation;
    });
  }
  for (auto& stream : process.gpu_streams) {
    for (GpuOp& op : stream.ops) {
      if (!op.correlation_id || op.kind == GpuOpKind::kSync) continue;
      const CallRef* found = nullptr;
      if (dense) {
        if (op.correlation_id >= low && op.correlation_id <= high &&
            table[op.correlation_id - low]) {
          found = &calls[table[op.correlation_id - low] - 1];
        }
      } else {
        auto it = std::lower_bound(
            calls.begin(), calls.end(), op.correlation_id,
            [](const CallRef& call, uint32_t id) { return call.correlation < id; });
        if (it != calls.end() && it->correlation == op.correlation_id) found = &*it;
      }
      if (!found) continue;
      op.launch_thread = found->thread;
      op.launch_call = found->call;
    }
  }
}

}  // namespace

void finalize_process(FileLoad& file) {
  ProcessTrack& process = file.process;
  const ReadTimeIndex& known = file.read_index;
  auto ready = [](const std::vector<uint8_t>& flags, size_t i) {
    return i < flags.size() && flags[i] != 0;
  };
  TimeNs begin = INT64_MAX, end = INT64_MIN;
  // Without a range from the reader, every event below is covered (one more pass).
  const bool measure = !known.have_range;
  auto cover = [&](TimeNs start, TimeNs stop) {
    begin = std::min(begin, start);
    end = std::max(end, stop);
  };
  for (size_t t = 0; t < process.threads.size(); ++t) {
    CpuThreadTrack& thread = process.threads[t];
    if (!ready(known.thread_ready, t)) {
      build_nesting(thread);
      sort_if_needed(thread.instants,
                     [](const Instant& a, const Instant& b) { return a.time < b.time; });
      sort_if_needed(thread.api_calls,
                     [](const ApiCall& a, const ApiCall& b) { return a.start < b.start; });
    }
    if (!measure) continue;
    for (const Span& span : thread.spans) cover(span.start, span.end);
    if (!thread.instants.empty()) cover(thread.instants.front().time, thread.instants.back().time);
    for (const auto& call : thread.api_calls) cover(call.start, call.end);
  }
  // Kernel details are indices, so they stay with their ops through a sort.
  for (size_t s = 0; s < process.gpu_streams.size(); ++s) {
    GpuStreamTrack& stream = process.gpu_streams[s];
    if (!ready(known.gpu_stream_ready, s) || stream.max_end.size() != stream.ops.size()) {
      sort_if_needed(stream.ops, [](const GpuOp& a, const GpuOp& b) { return a.start < b.start; });
      build_max_end(stream.ops, stream.max_end);
    }
    if (measure && !stream.ops.empty()) cover(stream.ops.front().start, stream.max_end.back());
  }
  if (!std::is_sorted(process.gpu_streams.begin(), process.gpu_streams.end(),
                      [](const GpuStreamTrack& a, const GpuStreamTrack& b) {
                        return a.device != b.device ? a.device < b.device : a.stream < b.stream;
                      })) {
    // Launch links point at threads, not streams: reordering streams keeps them valid.
    std::sort(process.gpu_streams.begin(), process.gpu_streams.end(),
              [](const GpuStreamTrack& a, const GpuStreamTrack& b) {
                return a.device != b.device ? a.device < b.device : a.stream < b.stream;
              });
  }
  for (size_t c = 0; c < process.communicators.size(); ++c) {
    CommunicatorTrack& comm = process.communicators[c];
    if (!ready(known.communicator_ready, c) || comm.max_end.size() != comm.ops.size()) {
      sort_if_needed(comm.ops, [](const CommOp& a, const CommOp& b) { return a.start < b.start; });
      build_max_end(comm.ops, comm.max_end);
    }
    if (!measure) continue;
    for (const CommOp& op : comm.ops) cover(std::min(op.enqueue, op.start), op.end);
  }
  for (size_t c = 0; c < process.counters.size(); ++c) {
    CounterTrack& counter = process.counters[c];
    if (!ready(known.counter_sorted, c) &&
        !std::is_sorted(counter.times.begin(), counter.times.end())) {
      std::vector<size_t> order(counter.times.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return counter.times[a] < counter.times[b]; });
      std::vector<TimeNs> times(order.size());
      std::vector<double> values(order.size());
      for (size_t i = 0; i < order.size(); ++i) {
        times[i] = counter.times[order[i]];
        values[i] = counter.values[order[i]];
      }
      counter.times = std::move(times);
      counter.values = std::move(values);
    }
    if (measure && !counter.times.empty()) cover(counter.times.front(), counter.times.back());
  }
  for_each_process_event_array([&](const auto& array) {
    if (!array.sorted_in_time_range) return;
    auto& events = process.*array.events;
    sort_if_needed(events, [](const auto& a, const auto& b) { return a.time < b.time; });
    if (measure && !events.empty()) cover(events.front().time, events.back().time);
  });
  build_memory_usage(process);
  if (measure) {
    for_each_sample_array([&](const auto& array) {
      if (!array.in_time_range) return;
      for (const auto& sample : file.*array.samples) cover(sample.time, sample.time);
    });
  }
  if (!known.launches_linked) link_launches(process);
  if (!measure) {
    begin = known.begin;
    end = known.end;
  }
  if (begin > end) begin = end = 0;
  process.begin = begin;
  process.end = end;
}

void shift_process_times(ProcessTrack& process, TimeNs offset) {
  if (offset == 0) return;
  process.clock_offset += offset;
  process.begin += offset;
  process.end += offset;
  if (process.recorder_running_until) process.recorder_running_until += offset;
  for (auto& thread : process.threads) {
    for (auto& span : thread.spans) span.start += offset, span.end += offset;
    for (auto& instant : thread.instants) instant.time += offset;
    for (auto& call : thread.api_calls) call.start += offset, call.end += offset;
    thread.last_time += offset;
  }
  for (auto& stream : process.gpu_streams) {
    for (auto& op : stream.ops) op.start += offset, op.end += offset;
    for (auto& time : stream.max_end) time += offset;
  }
  for (auto& comm : process.communicators) {
    for (auto& op : comm.ops) op.enqueue += offset, op.start += offset, op.end += offset;
    for (auto& time : comm.max_end) time += offset;
  }
  for (auto& counter : process.counters) {
    for (auto& time : counter.times) time += offset;
  }
  for_each_process_event_array([&](const auto& array) {
    for (auto& event : process.*array.events) event.time += offset;
  });
  for (auto& time : process.memory_usage.times) time += offset;
  for (auto& step : process.steps) step.start += offset, step.end += offset;
}

}  // namespace moescope::analysis
