// Reads one .moetrace file into a FileLoad: every record kind goes to its track, span
// begin/end are matched per stream, ranges by id. Damage is reported, never thrown.
#include <nlohmann/json.hpp>

#include <cstring>

#include "chunk_pipeline.h"
#include "file_load.h"
#include "moescope/trace/record_kinds.h"
#include "moescope/trace/time_arithmetic.h"
#include "moescope/trace/trace_reader.h"
#include "track_appender.h"

namespace moescope::analysis {
namespace {

using trace::RecordKind;
using trace::RecordView;

class MoetraceFileLoader {
 public:
  explicit MoetraceFileLoader(FileLoad& out) : out_(out), process_(out.process), tracks_(out) {}

  void read_metadata(const std::string& json_text) {
    process_.metadata_json = json_text;
    nlohmann::json meta = nlohmann::json::parse(json_text, nullptr, false);
    if (!meta.is_object()) return;
    auto integer = [&](const char* key, int64_t fallback) -> int64_t {
      auto found = meta.find(key);
      if (found == meta.end() || !found->is_number_integer()) return fallback;
      return found->get<int64_t>();
    };
    out_.metadata_rank = static_cast<int32_t>(integer("rank", -1));
    process_.world_size = static_cast<int32_t>(integer("world_size", 0));
    process_.pid = integer("pid", 0);
    out_.start_ns = integer("start_ns", 0);
    out_.start_unix_ns = integer("start_unix_ns", 0);
    auto host = meta.find("host");
    if (host != meta.end() && host->is_string()) process_.host = host->get<std::string>();
  }

  // Flattened: read_record and the appender functions inline into the loop over records.
  [[gnu::flatten]] void read_chunk(const trace::Chunk& chunk) {
    // Every record of a chunk comes from one stream: its thread track is looked up once, on
    // the first record that needs it (a chunk of GPU records makes no thread).
    chunk_stream_ = chunk.stream;
    chunk_thread_ = kNoIndex;
    for (RecordView record : chunk) read_record(record);
  }

  void reserve_projected(uint64_t bytes_read, uint64_t file_bytes) {
    tracks_.reserve_projected(bytes_read, file_bytes);
  }

  // Closes what is still open (see TrackAppender::finish) and makes the explicit flows.
  void finish() {
    std::vector<std::pair<uint32_t, uint32_t>> open_ranges;
    open_ranges.reserve(open_ranges_.size());
    for (const auto& [id, where] : open_ranges_) open_ranges.push_back(where);
    tracks_.finish(open_ranges);
    // Explicit flows: an arrow per id that has both a start and an end.
    for (const auto& [id, ends] : flow_ends_) {
      if (!ends.has_start || !ends.has_end) continue;
      FlowArrow arrow;
      arrow.from = {0, TrackKind::kThread, ends.start_thread};
      arrow.from_time = ends.start_time;
      arrow.to = {0, TrackKind::kThread, ends.end_thread};
      arrow.to_time = ends.end_time;
      arrow.id = id;
      out_.flows.push_back(arrow);
    }
  }

 private:
  struct FlowEnds {
    bool has_start = false, has_end = false;
    uint32_t start_thread = 0, end_thread = 0;
    TimeNs start_time = 0, end_time = 0;
  };

  uint32_t chunk_thread() {
    if (chunk_thread_ == kNoIndex) chunk_thread_ = tracks_.thread_of(chunk_stream_);
    return chunk_thread_;
  }

  // Made-up names of copies and syncs, interned once per kind.
  uint32_t made_up_name(uint32_t& cached, const char* text) {
    if (cached == 0) cached = out_.intern_extra(text);
    return cached;
  }

  // Compared as the signed times they are: as uint64, a negative end (2^63 and up) would pass
  // for a late one and the record would end before it begins.
  static TimeNs end_or_start(uint64_t start, uint64_t end) {
    return std::max(static_cast<TimeNs>(start), static_cast<TimeNs>(end));
  }

  // Dispatches to the decoder of the record's kind below.
  void read_record(const RecordView& record) { trace::dispatch_record(record, *this); }

 public:
  // ---- one decoder per record kind (trace::dispatch_record picks it) ----------------------
  // Names and totals: not events of the process.
  void on(const trace::StringRecord& string, const RecordView& record) {
    uint32_t length = std::min(string.length, record.tail_bytes<trace::StringRecord>());
    out_.file_strings[string.header.name].assign(
        reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), length);
  }
  void on(const trace::StatsRecord& stats, const RecordView&) {
    process_.dropped_events = stats.dropped_events + stats.dropped_gpu_records;
    const auto time = static_cast<TimeNs>(stats.header.time);
    if (trace::plausible_time(time)) {
      process_.recorder_running_until = std::max(process_.recorder_running_until, time);
    }
  }
  // The reader rejects chunks with records of unknown kinds: nothing reaches here.
  void on_unknown(const RecordView&) {}

  // Events: each decoder first counts its record (count_event).
  void on(const trace::SpanBeginRecord& begin, const RecordView&) {
    const TimeNs time = count_event(begin.header);
    Span span;
    span.start = time;
    span.end = time;
    span.name = begin.header.name;
    span.domain = begin.domain;
    tracks_.use_name(span.domain);
    tracks_.begin_span(chunk_thread(), span, true);
  }
  void on(const trace::SpanEndRecord& end, const RecordView&) {
    tracks_.end_span(chunk_thread(), count_event(end.header));
  }
  void on(const trace::SpanCompleteRecord& complete, const RecordView&) {
    Span span;
    span.start = count_event(complete.header);
    span.end = end_or_start(complete.header.time, complete.end_time);
    span.name = complete.header.name;
    span.domain = complete.domain;
    span.flags = kSpanComplete;
    tracks_.use_name(span.domain);
    tracks_.begin_span(chunk_thread(), span, false);
  }
  void on(const trace::RangeStartRecord& range, const RecordView&) {
    const TimeNs time = count_event(range.header);
    uint32_t t = chunk_thread();
    Span span;
    span.start = time;
    span.end = time;
    span.name = range.header.name;
    span.domain = range.domain;
    span.flags = kSpanFromRange;
    tracks_.use_name(span.domain);
    open_ranges_[range.range_id] = {t, tracks_.begin_span(t, span, false)};
  }
  void on(const trace::RangeEndRecord& range, const RecordView&) {
    const TimeNs time = count_event(range.header);
    tracks_.touch(chunk_thread(), time);
    auto found = open_ranges_.find(range.range_id);
    if (found == open_ranges_.end()) {
      ++process_.unmatched_range_ends;
      return;
    }
    tracks_.close_span(found->second.first, found->second.second, time);
    open_ranges_.erase(found);
  }
  void on(const trace::InstantRecord& instant, const RecordView&) {
    const TimeNs time = count_event(instant.header);
    tracks_.use_name(instant.domain);
    tracks_.add_instant(chunk_thread(), {time, instant.header.name, instant.domain});
  }
  void on(const trace::CounterRecord& counter, const RecordView&) {
    const TimeNs time = count_event(counter.header);
    tracks_.add_counter_sample(counter.header.name, time, counter.value);
  }
  void on(const trace::FlowRecord& flow, const RecordView&) {
    const TimeNs time = count_event(flow.header);
    uint32_t t = chunk_thread();
    FlowEnds& ends = flow_ends_[flow.flow_id];
    if (flow.phase == 0) {
      ends.has_start = true;
      ends.start_thread = t;
      ends.start_time = time;
    } else {
      ends.has_end = true;
      ends.end_thread = t;
      ends.end_time = time;
    }
  }
  void on(const trace::ApiCallRecord& call, const RecordView&) {
    const TimeNs time = count_event(call.header);
    tracks_.add_api_call(chunk_thread(), {time, end_or_start(call.header.time, call.end_time),
                                          call.header.name, call.correlation_id});
  }
  void on(const trace::GpuKernelRecord& kernel, const RecordView&) {
    const TimeNs time = count_event(kernel.header);
    const uint32_t stream_index = tracks_.gpu_stream(kernel.device, kernel.stream);
    GpuOp op;
    op.start = time;
    op.end = end_or_start(kernel.header.time, kernel.end_time);
    op.name = kernel.header.name;
    op.correlation_id = kernel.correlation_id;
    op.kind = GpuOpKind::kKernel;
    KernelDetail detail;
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_KERNEL_LAUNCH, detail, kernel);
    detail.context = kernel.context;
    op.detail = tracks_.kernel_detail(stream_index, kernel.header.name, detail);
    tracks_.add_gpu_op(stream_index, op);
  }
  void on(const trace::GpuCopyRecord& copy, const RecordView&) {
    GpuOp op;
    op.start = count_event(copy.header);
    op.end = end_or_start(copy.header.time, copy.end_time);
    op.correlation_id = copy.correlation_id;
    op.bytes = copy.bytes;
    op.kind = copy.is_memset ? GpuOpKind::kMemset : GpuOpKind::kMemcpy;
    op.copy_kind = copy.copy_kind;
    if (copy.header.name) {
      op.name = copy.header.name;
    } else {
      const uint32_t slot =
          op.kind == GpuOpKind::kMemset ? 0 : 1u + std::min(op.copy_kind, uint8_t{6});
      op.name = made_up_name(copy_names_[slot], copy_name(op));
    }
    tracks_.add_gpu_op(tracks_.gpu_stream(copy.device, copy.stream), op);
  }
  void on(const trace::GpuSyncRecord& sync, const RecordView&) {
    GpuOp op;
    op.start = count_event(sync.header);
    op.end = end_or_start(sync.header.time, sync.end_time);
    op.correlation_id = sync.correlation_id;
    op.kind = GpuOpKind::kSync;
    op.copy_kind = static_cast<uint8_t>(sync.sync_kind);
    op.name = made_up_name(sync_names_[std::min(sync.sync_kind, 5u)], sync_name(sync.sync_kind));
    // Host waits overlap the stream's work: they get the device's own track.
    op.detail = sync.sync_kind == 1 /*device*/ ? kAllStreams : sync.stream;
    tracks_.add_gpu_op(tracks_.gpu_stream(sync.device, kAllStreams), op);
    // The waiting thread is where the sync was recorded: its time moves on.
    tracks_.touch(chunk_thread(), op.end);
  }
  void on(const trace::MemoryRecord& memory, const RecordView&) {
    const TimeNs time = count_event(memory.header);
    MemoryEvent event;
    event.time = time;
    event.address = memory.address;
    event.bytes =
        // Negated as unsigned: a hostile 2^63 must not be a signed overflow (validation skips
        // such sizes afterwards).
        memory.is_free ? static_cast<int64_t>(uint64_t{0} - memory.bytes)
                       : static_cast<int64_t>(memory.bytes);
    event.device = memory.device;
    event.category = memory.category < kNumMemoryCategories ? memory.category : 0;
    event.is_free = memory.is_free ? 1 : 0;
    tracks_.cover(time, time);
    process_.memory_events.push_back(event);
  }
  void on(const trace::CommOpRecord& comm, const RecordView& record) {
    const TimeNs time = count_event(comm.header);
    const uint32_t comm_index = tracks_.communicator(comm.comm_id);
    auto& track = process_.communicators[comm_index];
    CommOp op;
    op.enqueue = time;
    op.start = comm.start_time ? static_cast<TimeNs>(comm.start_time) : time;
    if (comm.end_time && static_cast<TimeNs>(comm.end_time) >= op.start) {
      op.end = static_cast<TimeNs>(comm.end_time);
    } else {
      op.end = op.start;
      op.flags |= kCommEndUnknown;
    }
    op.name = comm.header.name;
    op.kind = comm.kind;
    op.bytes = comm.bytes;
    op.count = comm.count;
    op.group_id = comm.group_id;
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_COMM_PLACE, op, comm);
    op.dtype = comm.dtype;
    uint32_t splits = std::min<uint32_t>(
        comm.num_splits, record.tail_bytes<trace::CommOpRecord>() / sizeof(uint64_t));
    op.split_offset = static_cast<uint32_t>(track.split_bytes.size());
    op.num_splits = splits;
    const uint8_t* tail = record.tail<trace::CommOpRecord>();
    for (uint32_t i = 0; i < splits; ++i) {
      uint64_t value;
      std::memcpy(&value, tail + i * sizeof(uint64_t), sizeof(value));
      track.split_bytes.push_back(value);
    }
    tracks_.add_comm_op(comm_index, op);
  }
  void on(const trace::ExpertLoadRecord& load, const RecordView& record) {
    ExpertLoadSample& sample = add_event(out_.expert_loads, load.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_EXPERT_LOAD, sample, load);
    take_expert_tail<trace::ExpertLoadRecord>(record, out_.expert_tokens, sample);
  }
  void on(const trace::ExpertValuesRecord& values, const RecordView& record) {
    ExpertValuesSample sample;
    sample.time = count_event(values.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_EXPERT_VALUES, sample, values);
    take_expert_tail<trace::ExpertValuesRecord>(record, out_.expert_value_data, sample);
    out_.expert_values.push_back(sample);
  }
  void on(const trace::LayerStatsRecord& stats, const RecordView&) {
    LayerStatsSample& sample = add_event(out_.layer_stats, stats.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_LAYER_STATS, sample, stats);
  }
  void on(const trace::StepRecord& step, const RecordView&) {
    const TimeNs time = count_event(step.header);
    process_.step_markers.push_back({step.step, time, step.header.name != 0});
    tracks_.cover(time, time);
  }
  void on(const trace::RebalanceRecord& rebalance, const RecordView& record) {
    RebalanceDecision decision;
    decision.time = count_event(rebalance.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_REBALANCE, decision, rebalance);
    decision.applied = rebalance.applied != 0;
    // Traces before version 3 hold 0 (their reserved word) and no tail.
    if (rebalance.num_costs > 0 &&
        record.tail_bytes<trace::RebalanceRecord>() >= sizeof(trace::RebalanceCosts)) {
      trace::RebalanceCosts costs;
      std::memcpy(&costs, record.tail<trace::RebalanceRecord>(), sizeof(costs));
      MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_REBALANCE_COSTS, decision, costs);
      decision.has_costs = true;
    }
    out_.rebalances.push_back(decision);
  }
  void on(const trace::ThreadInfoRecord& info, const RecordView&) {
    count_event(info.header);
    auto& thread = process_.threads[chunk_thread()];
    thread.name = info.header.name;
    thread.os_thread_id = info.os_thread_id;
  }
  void on(const trace::ClockSyncRecord& sync, const RecordView&) {
    process_.clock_sync_points.push_back({sync.sync_id, count_event(sync.header)});
  }
  void on(const trace::TriggerRecord& trigger, const RecordView&) {
    TriggerEvent& event = add_event(process_.triggers, trigger.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_TRIGGER, event, trigger);
    event.detail = trigger.header.name;
  }
  void on(const trace::CollectiveOpenRecord& open_record, const RecordView&) {
    CollectiveOpen& open = add_event(process_.collectives_open, open_record.header);
    MOESCOPE_COPY_FIELDS(MOESCOPE_FIELDS_COLLECTIVE_OPEN, open, open_record);
    open.name = open_record.header.name;
  }

 private:
  // Appends an event (a ProcessTrack array's, or a sample counted in the time range) at the
  // record's time, counted and in the time range; the caller fills the rest.
  template <typename Event>
  Event& add_event(std::vector<Event>& events, const trace::RecordHeader& header) {
    Event& event = events.emplace_back();
    event.time = count_event(header);
    tracks_.cover(event.time, event.time);
    return event;
  }
  // Counts an event record, keeps its name and returns its time.
  TimeNs count_event(const trace::RecordHeader& header) {
    ++process_.events;
    ++process_.events_per_kind[header.kind & 31];
    tracks_.use_name(header.name);
    return static_cast<TimeNs>(header.time);
  }

  // Appends a record's tail of `count` elements to a model-wide array; returns its offset.
  template <typename Element>
  static uint32_t append_tail(std::vector<Element>& data, const uint8_t* tail, uint32_t count) {
    const uint32_t offset = static_cast<uint32_t>(data.size());
    data.resize(data.size() + count);
    if (count) std::memcpy(data.data() + offset, tail, count * sizeof(Element));  // null data()
    return offset;
  }

  // A per-expert record's array [num_experts] into the model-wide `data`: `sample` gets its
  // offset there and the count the record really holds (a short record's num_experts is cut to
  // the elements present).
  template <typename Record, typename Element, typename Sample>
  static void take_expert_tail(const RecordView& record, std::vector<Element>& data,
                               Sample& sample) {
    sample.num_experts = std::min<uint32_t>(
        sample.num_experts, static_cast<uint32_t>(record.tail_bytes<Record>() / sizeof(Element)));
    sample.offset = append_tail(data, record.tail<Record>(), sample.num_experts);
  }

  static const char* copy_name(const GpuOp& op) {
    if (op.kind == GpuOpKind::kMemset) return "Memset";
    static const char* const kNames[] = {"Memcpy",      "Memcpy HtoD", "Memcpy DtoH",
                                         "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"};
    return op.copy_kind < 6 ? kNames[op.copy_kind] : "Memcpy";
  }
  static const char* sync_name(uint32_t sync_kind) {
    static const char* const kNames[] = {"Synchronize", "cudaDeviceSynchronize",
                                         "cudaStreamSynchronize", "cudaEventSynchronize",
                                         "cudaStreamWaitEvent"};  // 0: not known
    return sync_kind < 5 ? kNames[sync_kind] : "Synchronize";
  }

  FileLoad& out_;
  ProcessTrack& process_;
  TrackAppender tracks_;
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> open_ranges_;  // id -> span
  std::unordered_map<uint64_t, FlowEnds> flow_ends_;
  uint32_t chunk_stream_ = 0;
  uint32_t chunk_thread_ = kNoIndex;
  uint32_t copy_names_[8] = {};  // memset, then 1 + copy kind
  uint32_t sync_names_[6] = {};
};

// Counts a read chunk in the process's chunk and stream totals (streams past 2^20 are not
// counted: a hostile id must not size the seen-set).
void count_chunk(const trace::Chunk& chunk, ProcessTrack& process,
                 std::vector<bool>& seen_streams) {
  ++process.chunks;
  if (chunk.stream >= (1u << 20)) return;
  if (chunk.stream >= seen_streams.size()) seen_streams.resize(chunk.stream + 1);
  if (!seen_streams[chunk.stream]) ++process.streams;
  seen_streams[chunk.stream] = true;
}

}  // namespace

uint32_t FileLoad::intern_extra(std::string_view text) {
  auto [found, inserted] =
      extra_index.try_emplace(std::string(text), static_cast<uint32_t>(extra_strings.size()));
  if (inserted) extra_strings.emplace_back(text);
  return kLocalExtraBit | found->second;
}

FileLoad read_moetrace_file(const std::string& path, const BytesProgress& progress,
                            const MoetraceReadOptions& options) {
  FileLoad out;
  out.process.file = path;
  out.process.source_format = "moetrace";
  trace::TraceReader reader;
  out.opened = reader.open(path);
  const std::atomic<bool>* cancel = options.cancel;
  auto cancelled = [&] { return cancel && cancel->load(std::memory_order_relaxed); };
  if (out.opened) {
    MoetraceFileLoader loader(out);
    loader.read_metadata(reader.metadata_json());
    std::vector<bool> seen_streams;
    // Reserve ahead after 1/16 and again after 1/4 of the file (see reserve_projected); not
    // when only the beginning is read.
    uint64_t next_checkpoint = options.max_events ? 0 : reader.file_size() / 16;
    auto consume = [&](const trace::Chunk& chunk) {
      if (next_checkpoint != 0 && chunk.file_offset >= next_checkpoint) {
        loader.reserve_projected(chunk.file_offset, reader.file_size());
        next_checkpoint = next_checkpoint < reader.file_size() / 4 ? reader.file_size() / 4 : 0;
      }
      loader.read_chunk(chunk);
      count_chunk(chunk, out.process, seen_streams);
    };
    auto enough = [&] { return options.max_events && out.process.events >= options.max_events; };
    trace::Chunk chunk;
    bool stopped_early = false;
    if (options.pipelined) {
      // Leaving the scope stops the decoder (also when stopping early) and joins it.
      ChunkPipeline pipeline(reader, cancel, progress);
      while (!(stopped_early = enough()) && pipeline.next(chunk)) consume(chunk);
    } else {
      uint64_t reported = 0;
      while (!cancelled() && !(stopped_early = enough()) && reader.next_chunk(chunk)) {
        consume(chunk);
        if (progress && reader.position() - reported >= (4u << 20)) {
          reported = reader.position();
          progress(reported, reader.file_size());
        }
      }
    }
    if (cancelled()) out.errors.push_back({path, reader.position(), "loading cancelled"});
    loader.finish();
    // Without the decoder thread, a stop right after the end chunk left nothing unread; the
    // decoder may have read ahead of what was consumed.
    out.process.truncated = stopped_early && (options.pipelined || !reader.saw_end());
    out.process.complete = reader.saw_end();
    if (progress) progress(reader.file_size(), reader.file_size());
  }
  for (const trace::ReadError& error : reader.errors()) {
    out.errors.push_back({error.file.empty() ? path : error.file, error.offset, error.message});
  }
  return out;
}

FileLoad load_moetrace_chunks(const std::string& path, const std::string& metadata_json,
                              std::span<const trace::Chunk> chunks, bool complete) {
  FileLoad out;
  out.opened = true;
  out.process.file = path;
  out.process.source_format = "moetrace";
  MoetraceFileLoader loader(out);
  loader.read_metadata(metadata_json);
  std::vector<bool> seen_streams;
  for (const trace::Chunk& chunk : chunks) {
    loader.read_chunk(chunk);
    count_chunk(chunk, out.process, seen_streams);
  }
  loader.finish();
  out.process.complete = complete;
  validate_decoded_records(out);
  finalize_process(out);
  return out;
}

FileLoad load_moetrace_file(const std::string& path, const BytesProgress& progress,
                            const MoetraceReadOptions& options) {
  FileLoad out = read_moetrace_file(path, progress, options);
  if (out.opened) {
    validate_decoded_records(out);  // records that decode fine but make no sense
    finalize_process(out);
  }
  return out;
}

}  // namespace moescope::analysis
