// Sanity checks of decoded .moetrace records (see validate_decoded_records in file_load.h).
//
// The chunk reader guarantees that records are whole and inside their chunk; it cannot know
// whether their values make sense. A file written by a buggy or hostile program may hold times
// at the int64 limits (end - start then overflows in every analysis), an expert layer of 2^31,
// an all-to-all whose split row does not match its ranks (the traffic matrix is ranks x ranks:
// 2^31 ranks would ask for 2^62 cells) or step numbers going backwards. Such records are skipped
// (or, for a bad split row, the row is dropped) and counted, one warning per kind of problem and
// track, and the rest of the file is analysed.
//
// Fast path: when the reader's own time range is plausible every time is, and only the few
// sample records are looked at.
#include <algorithm>
#include <map>
#include <string>

#include "file_load.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

using trace::plausible_time;

// More than any model or job has: a larger value is a damaged record.
constexpr uint32_t kMaxLayerId = 1u << 20;
constexpr int32_t kMaxRanks = 1 << 20;
constexpr int32_t kMaxAllToAllRanks = 1 << 10;  // its matrix is ranks^2 cells (1 M at most)

// Counted problems of one file: "what" -> count, reported once each.
class Problems {
 public:
  void add(const std::string& what, uint64_t count = 1) {
    if (count) counts_[what] += count;
  }
  bool any() const { return !counts_.empty(); }
  void report(FileLoad& file) const {
    for (const auto& [what, count] : counts_) {
      file.errors.push_back({file.process.file, 0, std::to_string(count) + " " + what});
    }
  }

 private:
  std::map<std::string, uint64_t> counts_;
};

// Removes the items `bad` says are bad; returns how many.
template <typename Item, typename Bad>
uint64_t remove_bad(std::vector<Item>& items, Bad bad) {
  const size_t before = items.size();
  items.erase(std::remove_if(items.begin(), items.end(), bad), items.end());
  return before - items.size();
}

const char* kOutside = "outside +-2^62 ns";

void clear_flag(std::vector<uint8_t>& flags, size_t index) {
  if (index < flags.size()) flags[index] = 0;
}

// Removes the ops of track `index` (a GPU stream or a communicator) that `bad` says are bad and
// counts them as `what`. When any went, the track's read index is stale: its ready flag is
// cleared and its running maximum of ends (`max_end`) dropped, to be rebuilt. Returns whether any
// went.
template <typename Track, typename Bad>
bool remove_bad_ops(Track& track, std::vector<uint8_t>& ready, size_t index, Bad bad,
                    const std::string& what, Problems& problems) {
  const uint64_t ops = remove_bad(track.ops, bad);
  problems.add(what, ops);
  if (!ops) return false;
  clear_flag(ready, index);
  track.max_end.clear();
  return true;
}

// "memory_events" -> "memory events": a registry row's name in a message.
std::string words(const char* name) {
  std::string text = name;
  std::replace(text.begin(), text.end(), '_', ' ');
  return text;
}

// Times: every item with a time outside +-2^62 ns (or an end before its start) is skipped.
void check_times(FileLoad& file, Problems& problems) {
  ProcessTrack& process = file.process;
  ReadTimeIndex& index = file.read_index;
  bool removed_any = false;
  auto bad_interval = [](TimeNs start, TimeNs end) {
    return !plausible_time(start) || !plausible_time(end) || end < start;
  };
  for (size_t t = 0; t < process.threads.size(); ++t) {
    CpuThreadTrack& thread = process.threads[t];
    const std::string where = " on thread " + std::to_string(thread.os_thread_id);
    uint64_t spans =
        remove_bad(thread.spans, [&](const Span& s) { return bad_interval(s.start, s.end); });
    uint64_t instants =
        remove_bad(thread.instants, [](const Instant& i) { return !plausible_time(i.time); });
    uint64_t calls = remove_bad(thread.api_calls,
                                [&](const ApiCall& c) { return bad_interval(c.start, c.end); });
    problems.add(std::string("span(s) with a time ") + kOutside + where + " skipped", spans);
    problems.add(std::string("instant(s) with a time ") + kOutside + where + " skipped", instants);
    problems.add(std::string("API call(s) with a time ") + kOutside + where + " skipped", calls);
    if (spans + instants + calls) {
      clear_flag(index.thread_ready, t);
      thread.last_time = std::clamp<TimeNs>(thread.last_time, -trace::kMaxPlausibleTimeNs,
                                            trace::kMaxPlausibleTimeNs);
      removed_any = true;
      if (calls) index.launches_linked = false;  // GPU ops point at API calls by index
    }
  }
  for (size_t s = 0; s < process.gpu_streams.size(); ++s) {
    GpuStreamTrack& stream = process.gpu_streams[s];
    removed_any |= remove_bad_ops(
        stream, index.gpu_stream_ready, s,
        [&](const GpuOp& op) { return bad_interval(op.start, op.end); },
        std::string("GPU op(s) with a time ") + kOutside + " on device " +
            std::to_string(stream.device) + " stream " + std::to_string(stream.stream) + " skipped",
        problems);
  }
  for (size_t c = 0; c < process.communicators.size(); ++c) {
    removed_any |= remove_bad_ops(
        process.communicators[c], index.communicator_ready, c,
        [&](const CommOp& op) {
          return !plausible_time(op.enqueue) || bad_interval(op.start, op.end);
        },
        std::string("collective(s) with a time ") + kOutside + " skipped", problems);
  }
  for (size_t c = 0; c < process.counters.size(); ++c) {
    CounterTrack& counter = process.counters[c];
    size_t kept = 0;
    for (size_t i = 0; i < counter.times.size() && i < counter.values.size(); ++i) {
      if (!plausible_time(counter.times[i])) continue;
      counter.times[kept] = counter.times[i];
      counter.values[kept] = counter.values[i];
      ++kept;
    }
    const uint64_t dropped = counter.times.size() - kept;
    counter.times.resize(kept);
    counter.values.resize(kept);
    problems.add(std::string("counter sample(s) with a time ") + kOutside + " skipped", dropped);
    if (dropped) removed_any = true;
  }
  auto time_bad = [](const auto& item) { return !plausible_time(item.time); };
  // Drops the items `bad` says have a time outside, counted as `what`; whether any went.
  auto drop_outside = [&](auto& items, const std::string& what, auto bad) {
    const uint64_t dropped = remove_bad(items, bad);
    problems.add(what + " with a time " + kOutside + " skipped", dropped);
    return dropped != 0;
  };
  // Every array of the registry (trace_model.h). Those the reader's time range covers
  // (tracks_.cover in moetrace_file_load.cpp, the rows' time-range flag): dropping one makes
  // finalize measure the range again.
  for_each_process_event_array([&](const auto& array) {
    const bool dropped = drop_outside(process.*array.events, words(array.name), time_bad);
    removed_any |= dropped && array.sorted_in_time_range;
  });
  for_each_sample_array([&](const auto& array) {
    const bool dropped = drop_outside(file.*array.samples, words(array.name), time_bad);
    removed_any |= dropped && array.in_time_range;
  });
  drop_outside(file.flows, "flows", [](const FlowArrow& flow) {
    return !plausible_time(flow.from_time) || !plausible_time(flow.to_time);
  });
  if (removed_any) index.have_range = false;  // finalize measures the range again
}

// Sample records: layer ids, ranks, split rows, step order. These are few; always checked.
void check_values(FileLoad& file, Problems& problems) {
  auto bad_layer = [](const auto& sample) { return sample.layer > kMaxLayerId; };
  const std::string layer = " with a layer id above " + std::to_string(kMaxLayerId) + " skipped";
  problems.add("expert load sample(s)" + layer, remove_bad(file.expert_loads, bad_layer));
  problems.add("expert value sample(s)" + layer, remove_bad(file.expert_values, bad_layer));
  problems.add("layer statistics" + layer, remove_bad(file.layer_stats, bad_layer));
  problems.add("rebalance decision(s)" + layer, remove_bad(file.rebalances, bad_layer));

  for (CommunicatorTrack& comm : file.process.communicators) {
    comm.num_ranks = 0;
    for (CommOp& op : comm.ops) {
      if (op.num_ranks < 0 || op.num_ranks > kMaxRanks) {
        problems.add("collective(s) with a rank count outside [0, " + std::to_string(kMaxRanks) +
                     "]: the count and split row ignored");
        op.num_ranks = 0;
        op.num_splits = 0;
      }
      if (op.kind == kCommKindAllToAll && op.num_splits != 0 &&
          (op.num_splits > uint32_t(kMaxAllToAllRanks) ||
           (op.num_ranks > 0 && op.num_splits != uint32_t(op.num_ranks)))) {
        problems.add(
            "all-to-all(s) whose split row does not have one entry per rank (or more "
            "than " +
            std::to_string(kMaxAllToAllRanks) + "): the row is left out of the traffic matrix");
        op.num_splits = 0;
      }
      if (op.kind == kCommKindAllToAll && op.num_ranks > kMaxAllToAllRanks) {
        problems.add("all-to-all(s) over more than " + std::to_string(kMaxAllToAllRanks) +
                     " ranks: their rank count is ignored by the traffic matrix");
        op.num_ranks = 0;
      }
      comm.num_ranks = std::max(comm.num_ranks, op.num_ranks);
    }
  }

  // Memory sizes: at most 2^50 bytes (1 PiB) each and 2^62 in all, so every sum the memory
  // analysis forms over them fits an int64.
  constexpr uint64_t kMaxAllocationBytes = uint64_t{1} << 50;
  constexpr uint64_t kMaxTotalBytes = uint64_t{1} << 62;
  uint64_t total_bytes = 0;
  problems.add("memory event(s) of more than 2^50 bytes (or past 2^62 bytes in all) skipped",
               remove_bad(file.process.memory_events, [&](const MemoryEvent& event) {
                 const uint64_t bytes = trace::magnitude(event.bytes);
                 if (bytes > kMaxAllocationBytes) return true;
                 if (total_bytes + bytes > kMaxTotalBytes) return true;
                 total_bytes += bytes;
                 return false;
               }));

  // Step numbers in time order must not go backwards (a restarted counter, a damaged record):
  // such a marker is skipped rather than folding two steps' times together.
  auto& markers = file.process.step_markers;
  std::stable_sort(markers.begin(), markers.end(),
                   [](const StepMarker& a, const StepMarker& b) { return a.time < b.time; });
  bool have_previous = false;
  int64_t previous = 0;
  problems.add("step marker(s) with a step number lower than the step before skipped",
               remove_bad(markers, [&](const StepMarker& marker) {
                 if (marker.is_end) return false;
                 if (have_previous && marker.step < previous) return true;
                 have_previous = true;
                 previous = marker.step;
                 return false;
               }));
}

}  // namespace

void validate_decoded_records(FileLoad& file) {
  Problems problems;
  const ReadTimeIndex& index = file.read_index;
  const bool range_plausible = index.have_range && index.begin <= index.end &&
                               plausible_time(index.begin) && plausible_time(index.end);
  // The registry's arrays outside the reader's range (clock sync points, expert values,
  // rebalance decisions) and flows: looked at when the rest is fine.
  bool others_plausible = true;
  auto all_plausible = [](const auto& items) {
    return std::all_of(items.begin(), items.end(),
                       [](const auto& item) { return plausible_time(item.time); });
  };
  for_each_process_event_array([&](const auto& array) {
    if (!array.sorted_in_time_range) others_plausible &= all_plausible(file.process.*array.events);
  });
  for_each_sample_array([&](const auto& array) {
    if (!array.in_time_range) others_plausible &= all_plausible(file.*array.samples);
  });
  for (const auto& flow : file.flows) {
    others_plausible &= plausible_time(flow.from_time) && plausible_time(flow.to_time);
  }
  if (!range_plausible || !others_plausible) check_times(file, problems);
  check_values(file, problems);
  problems.report(file);
}

}  // namespace moescope::analysis
