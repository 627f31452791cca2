#include "moescope/viewer/timeline_index.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <thread>

#include "moescope/analysis/collective_mismatch.h"

namespace moescope::viewer {

using analysis::ProcessTrack;
using analysis::TraceModel;

namespace {

std::string rank_prefix(const ProcessTrack& process) {
  return "rank " + std::to_string(process.rank) + " | ";
}

// Lanes for start-sorted items that may overlap (GPU ops, comm ops): first-fit lane per item
// (as assign_lanes), each lane reserved to its exact size so its pages are touched once.
template <typename Item>
std::vector<Lane> lanes_of_sorted_items(const std::vector<Item>& items) {
  std::vector<uint32_t> lane_of(items.size());
  std::vector<int64_t> lane_end;  // end of the last item placed in each lane
  std::vector<size_t> lane_size;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t start = items[i].start;
    uint32_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > start) ++lane;
    if (lane == lane_end.size()) lane_end.push_back(0), lane_size.push_back(0);
    lane_end[lane] = std::max(items[i].end, start);
    ++lane_size[lane];
    lane_of[i] = lane;
  }
  std::vector<Lane> lanes(lane_end.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    lanes[l].start_ns.reserve(lane_size[l]);
    lanes[l].end_ns.reserve(lane_size[l]);
    lanes[l].event.reserve(lane_size[l]);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    lanes[lane_of[i]].push(items[i].start, std::max(items[i].end, items[i].start),
                           static_cast<uint32_t>(i));
  }
  for (Lane& lane : lanes) lane.build_fold_index();
  return lanes;
}

// One lane per nesting depth: spans of one depth never overlap.
std::vector<Lane> lanes_of_thread(const analysis::CpuThreadTrack& thread) {
  std::vector<Lane> lanes(thread.spans_by_depth.size());
  for (size_t depth = 0; depth < lanes.size(); ++depth) {
    const auto& depth_indices = thread.spans_by_depth[depth];
    Lane& lane = lanes[depth];
    lane.start_ns.reserve(depth_indices.size());
    lane.end_ns.reserve(depth_indices.size());
    lane.event.reserve(depth_indices.size());
    for (uint32_t span_index : depth_indices) {
      const auto& span = thread.spans[span_index];
      lane.push(span.start, std::max(span.end, span.start), span_index);
    }
    lane.build_fold_index();
  }
  return lanes;
}

bool is_plot(TimelineTrackKind kind) {
  return kind == TimelineTrackKind::kCounter || kind == TimelineTrackKind::kMemory;
}

// Times and values of a plot track (a counter, or total memory in use).
void plot_series(const TraceModel& model, const TimelineTrack& track,
                 const std::vector<int64_t>*& times, const std::vector<double>*& values,
                 const std::vector<int64_t>*& int_values) {
  const ProcessTrack& process = model.processes[track.process];
  times = nullptr;
  values = nullptr;
  int_values = nullptr;
  if (track.kind == TimelineTrackKind::kCounter) {
    times = &process.counters[track.track].times;
    values = &process.counters[track.track].values;
  } else {
    times = &process.memory_usage.times;
    int_values = &process.memory_usage.total;
  }
}

}  // namespace

int TimelineIndex::find_track(const analysis::TrackRef& ref) const {
  TimelineTrackKind wanted = ref.kind == analysis::TrackKind::kThread ? TimelineTrackKind::kThread
                             : ref.kind == analysis::TrackKind::kGpuStream
                                 ? TimelineTrackKind::kGpuStream
                                 : TimelineTrackKind::kCommunicator;
  for (size_t i = 0; i < tracks.size(); ++i) {
    const TimelineTrack& track = tracks[i];
    if (track.kind == wanted && track.process == ref.process && track.track == ref.track) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::vector<TrackShape> TimelineIndex::shapes() const {
  std::vector<TrackShape> shapes;
  shapes.reserve(tracks.size());
  for (const TimelineTrack& track : tracks) {
    TrackShape shape;
    shape.is_plot = is_plot(track.kind);
    shape.num_lanes = std::max<uint32_t>(static_cast<uint32_t>(track.lanes.size()), 1);
    shape.collapsed = track.collapsed;
    shapes.push_back(shape);
  }
  return shapes;
}

TimelineIndex build_timeline_index(const TraceModel& model) {
  TimelineIndex index;
  index.begin_ns = model.begin;
  index.end_ns = model.end;
  for (const ProcessTrack& process : model.processes) {
    // A rank that waited in a collective until its recording stopped wrote nothing while it
    // waited: the timeline reaches on to the recording's end, where that wait is drawn to.
    if (!process.collectives_open.empty()) {
      index.waits_end_ns = std::max(index.waits_end_ns, analysis::recording_end(process));
      index.end_ns = std::max(index.end_ns, index.waits_end_ns);
    }
    if (process.steps.empty()) continue;
    const bool first = index.steps_begin_ns == 0 && index.steps_end_ns == 0;
    index.steps_begin_ns = first ? process.steps.front().start
                                 : std::min(index.steps_begin_ns, process.steps.front().start);
    index.steps_end_ns =
        first ? process.steps.back().end : std::max(index.steps_end_ns, process.steps.back().end);
  }
  // The tracks and their labels first; their lanes (copies of every span's times: most of the
  // work) are built afterwards, tracks spread over the hardware threads.
  for (uint32_t p = 0; p < model.processes.size(); ++p) {
    const ProcessTrack& process = model.processes[p];
    std::string prefix = rank_prefix(process);
    for (uint32_t t = 0; t < process.threads.size(); ++t) {
      const auto& thread = process.threads[t];
      if (thread.spans_by_depth.empty() && thread.api_calls.empty()) continue;
      TimelineTrack track{TimelineTrackKind::kThread, p, t, {}, {}, false};
      std::string name = model.name(thread.name);
      track.label = prefix + "thread " + (name.empty() ? std::to_string(thread.stream) : name);
      if (thread.os_thread_id != 0) track.label += " (" + std::to_string(thread.os_thread_id) + ")";
      index.tracks.push_back(std::move(track));
    }
    for (uint32_t s = 0; s < process.gpu_streams.size(); ++s) {
      const auto& stream = process.gpu_streams[s];
      TimelineTrack track{TimelineTrackKind::kGpuStream, p, s, {}, {}, false};
      track.label =
          prefix + "GPU " + std::to_string(stream.device) +
          (stream.stream == analysis::kAllStreams ? std::string(" | device syncs")
                                                  : " | stream " + std::to_string(stream.stream));
      index.tracks.push_back(std::move(track));
    }
    for (uint32_t c = 0; c < process.communicators.size(); ++c) {
      const auto& communicator = process.communicators[c];
      TimelineTrack track{TimelineTrackKind::kCommunicator, p, c, {}, {}, false};
      char id[32];
      std::snprintf(id, sizeof(id), "%llx", static_cast<unsigned long long>(communicator.comm_id));
      track.label =
          prefix + "comm " + id + " (" + std::to_string(communicator.num_ranks) + " ranks)";
      index.tracks.push_back(std::move(track));
    }
    if (!process.memory_usage.times.empty()) {
      TimelineTrack track{TimelineTrackKind::kMemory, p, 0, prefix + "memory in use", {}, false};
      index.tracks.push_back(std::move(track));
    }
    for (uint32_t c = 0; c < process.counters.size(); ++c) {
      const auto& values = process.counters[c].values;
      const bool constant = std::all_of(values.begin(), values.end(),
                                        [&](double value) { return value == values.front(); });
      TimelineTrack track{TimelineTrackKind::kCounter, p, c, {}, {}, constant};
      track.label = prefix + "counter " + model.name(process.counters[c].name) +
                    (constant ? " (constant)" : "");
      index.tracks.push_back(std::move(track));
    }
  }
  auto build_lanes = [&](TimelineTrack& track) {
    const ProcessTrack& process = model.processes[track.process];
    switch (track.kind) {
      case TimelineTrackKind::kThread:
        track.lanes = lanes_of_thread(process.threads[track.track]);
        break;
      case TimelineTrackKind::kGpuStream:
        track.lanes = lanes_of_sorted_items(process.gpu_streams[track.track].ops);
        break;
      case TimelineTrackKind::kCommunicator:
        track.lanes = lanes_of_sorted_items(process.communicators[track.track].ops);
        break;
      default:
        break;
    }
  };
  const size_t workers =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), index.tracks.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t t = next.fetch_add(1); t < index.tracks.size(); t = next.fetch_add(1)) {
      build_lanes(index.tracks[t]);
    }
  };
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (std::thread& thread : pool) thread.join();
  for (const TimelineTrack& track : index.tracks) {
    for (const Lane& lane : track.lanes) index.num_spans += lane.size();
  }
  return index;
}

std::array<double, analysis::kNumMemoryCategories> memory_stack_tops(
    const analysis::MemoryUsage& usage, size_t sample) {
  std::array<double, analysis::kNumMemoryCategories> tops{};
  double top = 0.0;
  for (int c = 0; c < analysis::kNumMemoryCategories; ++c) {
    const auto& series = usage.by_category[c];
    if (sample < series.size()) top += static_cast<double>(std::max<int64_t>(series[sample], 0));
    tops[static_cast<size_t>(c)] = top;
  }
  return tops;
}

void build_timeline_frame(const TraceModel& model, const TimelineIndex& index,
                          const std::vector<TrackRows>& rows, float view_top, float view_bottom,
                          const TimeAxis& axis, double fold_px, TimelineFrame& frame) {
  frame.clear();
  for (uint32_t t = 0; t < index.tracks.size() && t < rows.size(); ++t) {
    const TimelineTrack& track = index.tracks[t];
    const TrackRows& row = rows[t];
    if (track.collapsed || row.bottom <= view_top || row.top >= view_bottom) continue;
    if (is_plot(track.kind)) {
      const std::vector<int64_t>* times;
      const std::vector<double>* values;
      const std::vector<int64_t>* int_values;
      plot_series(model, track, times, values, int_values);
      if (times->empty()) continue;
      PlotRun run{t, static_cast<uint32_t>(frame.points.size()), 0, 0.0};
      // One point per 2-px column: the value in force at the column's time (binary search),
      // so the cost does not grow with the number of samples.
      int columns = static_cast<int>(axis.width_px() / 2.0) + 1;
      for (int column = 0; column <= columns; ++column) {
        double x = column * 2.0;
        double time = axis.x_to_time(x);
        auto after = std::upper_bound(times->begin(), times->end(), time,
                                      [](double value, int64_t sample) { return value < sample; });
        if (after == times->begin()) continue;
        size_t sample = static_cast<size_t>(after - times->begin()) - 1;
        double value = values ? (*values)[sample] : static_cast<double>((*int_values)[sample]);
        frame.points.push_back({static_cast<float>(x), value, static_cast<uint32_t>(sample)});
      }
      for (size_t i = 0; i < times->size(); i += std::max<size_t>(times->size() / 4096, 1)) {
        double value = values ? (*values)[i] : static_cast<double>((*int_values)[i]);
        run.max_value = std::max(run.max_value, value);
      }
      run.num_points = static_cast<uint32_t>(frame.points.size()) - run.first_point;
      frame.plot_runs.push_back(run);
      continue;
    }
    float lane_height = track.lanes.empty() ? 0.0f
                                            : (row.bottom - row.content_top) /
                                                  static_cast<float>(track.lanes.size());
    for (uint32_t l = 0; l < track.lanes.size(); ++l) {
      float lane_top = row.content_top + lane_height * static_cast<float>(l);
      if (lane_top + lane_height <= view_top || lane_top >= view_bottom) continue;
      LaneRun run{t, l, static_cast<uint32_t>(frame.items.size()), 0};
      build_lane_draw_items(track.lanes[l], axis, fold_px, frame.items);
      run.num_items = static_cast<uint32_t>(frame.items.size()) - run.first_item;
      if (run.num_items > 0) frame.lane_runs.push_back(run);
    }
  }
}

EventSummary summarize_event(const TraceModel& model, const TimelineIndex& index,
                             const EventRef& ref) {
  EventSummary summary;
  if (!ref.valid() || static_cast<size_t>(ref.track) >= index.tracks.size()) return summary;
  const TimelineTrack& track = index.tracks[static_cast<size_t>(ref.track)];
  if (static_cast<size_t>(ref.lane) >= track.lanes.size()) return summary;
  const Lane& lane = track.lanes[static_cast<size_t>(ref.lane)];
  if (static_cast<size_t>(ref.slot) >= lane.size()) return summary;
  size_t slot = static_cast<size_t>(ref.slot);
  summary.start_ns = lane.start_ns[slot];
  summary.end_ns = lane.end_ns[slot];
  const ProcessTrack& process = model.processes[track.process];
  uint32_t event = lane.event[slot];
  switch (track.kind) {
    case TimelineTrackKind::kThread:
      summary.name = process.threads[track.track].spans[event].name;
      break;
    case TimelineTrackKind::kGpuStream:
      summary.name = process.gpu_streams[track.track].ops[event].name;
      break;
    case TimelineTrackKind::kCommunicator:
      summary.name = process.communicators[track.track].ops[event].name;
      break;
    default:
      break;
  }
  return summary;
}

std::vector<analysis::FlowArrow> arrows_of_event(const TraceModel& model,
                                                 const TimelineIndex& index, const EventRef& ref,
                                                 size_t max_arrows) {
  std::vector<analysis::FlowArrow> arrows;
  if (!ref.valid() || static_cast<size_t>(ref.track) >= index.tracks.size()) return arrows;
  const TimelineTrack& track = index.tracks[static_cast<size_t>(ref.track)];
  EventSummary summary = summarize_event(model, index, ref);
  const ProcessTrack& process = model.processes[track.process];
  auto launch_arrow = [&](uint32_t stream_index, const analysis::GpuOp& op) {
    const auto& call = process.threads[op.launch_thread].api_calls[op.launch_call];
    analysis::FlowArrow arrow;
    arrow.from = {track.process, analysis::TrackKind::kThread, op.launch_thread};
    arrow.from_time = call.start;
    arrow.to = {track.process, analysis::TrackKind::kGpuStream, stream_index};
    arrow.to_time = op.start;
    arrow.id = op.correlation_id;
    return arrow;
  };
  auto launched = [&](const analysis::GpuOp& op) {
    return op.launch_thread < process.threads.size() &&
           op.launch_call < process.threads[op.launch_thread].api_calls.size();
  };
  if (track.kind == TimelineTrackKind::kGpuStream) {
    uint32_t event =
        track.lanes[static_cast<size_t>(ref.lane)].event[static_cast<size_t>(ref.slot)];
    const auto& op = process.gpu_streams[track.track].ops[event];
    if (launched(op)) arrows.push_back(launch_arrow(track.track, op));
  } else if (track.kind == TimelineTrackKind::kThread) {
    for (uint32_t s = 0; s < process.gpu_streams.size(); ++s) {
      for (const auto& op : process.gpu_streams[s].ops) {
        if (arrows.size() >= max_arrows) break;
        if (!launched(op) || op.launch_thread != track.track) continue;
        analysis::TimeNs call_start =
            process.threads[op.launch_thread].api_calls[op.launch_call].start;
        if (call_start >= summary.start_ns && call_start <= summary.end_ns) {
          arrows.push_back(launch_arrow(s, op));
        }
      }
    }
  }
  // Explicit flows that start or end inside the selected event on its track.
  for (const auto& flow : model.flows) {
    if (arrows.size() >= max_arrows) break;
    auto inside = [&](const analysis::TrackRef& at, analysis::TimeNs time) {
      return at.process == track.process && index.find_track(at) == ref.track &&
             time >= summary.start_ns && time <= summary.end_ns;
    };
    if (inside(flow.from, flow.from_time) || inside(flow.to, flow.to_time)) arrows.push_back(flow);
  }
  std::sort(arrows.begin(), arrows.end(),
            [](const analysis::FlowArrow& a, const analysis::FlowArrow& b) {
              return a.from_time < b.from_time;
            });
  return arrows;
}

int step_match(int current, size_t count, bool previous) {
  if (count == 0) return -1;
  const int n = static_cast<int>(count);
  if (previous) return current <= 0 || current > n ? n - 1 : current - 1;
  return current < 0 || current >= n - 1 ? 0 : current + 1;
}

std::vector<EventRef> search_events(const TraceModel& model, const TimelineIndex& index,
                                    const std::string& query) {
  std::vector<EventRef> found;
  if (query.empty()) return found;
  auto lower = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  };
  // Decide per interned name once, then test each event by its name id.
  std::string needle = lower(query);
  std::vector<uint8_t> name_matches(model.strings.size(), 0);
  for (size_t id = 0; id < model.strings.size(); ++id) {
    name_matches[id] =
        lower(model.strings[static_cast<analysis::StringId>(id)]).find(needle) != std::string::npos;
  }
  struct Timed {
    int64_t start;
    EventRef ref;
  };
  std::vector<Timed> hits;
  for (size_t t = 0; t < index.tracks.size(); ++t) {
    const TimelineTrack& track = index.tracks[t];
    for (size_t l = 0; l < track.lanes.size(); ++l) {
      const Lane& lane = track.lanes[l];
      for (size_t slot = 0; slot < lane.size(); ++slot) {
        EventRef ref{static_cast<int>(t), static_cast<int>(l), static_cast<int64_t>(slot)};
        analysis::StringId name = summarize_event(model, index, ref).name;
        if (name < name_matches.size() && name_matches[name])
          hits.push_back({lane.start_ns[slot], ref});
      }
    }
  }
  std::stable_sort(hits.begin(), hits.end(),
                   [](const Timed& a, const Timed& b) { return a.start < b.start; });
  found.reserve(hits.size());
  for (const Timed& hit : hits) found.push_back(hit.ref);
  return found;
}

}  // namespace moescope::viewer
