// Reads one .moetrace file into a FileLoad: every record kind goes to its track, span
// begin/end are matched per stream, ranges by id. Damage is reported, never thrown.
#include <nlohmann/json.hpp>

#include <cstring>

#include "chunk_pipeline.h"
#include "file_load.h"
#include "moescope/profiler/trace_reader.h"

namespace moescope::analysis {
namespace {

using trace::RecordKind;
using trace::RecordView;

class MoetraceFileLoader {
 public:
  explicit MoetraceFileLoader(FileLoad& out) : out_(out), process_(out.process) {}

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

  void read_chunk(const trace::Chunk& chunk) {
    for (RecordView record : chunk) read_record(chunk.stream, record);
  }

  // Closes what is still open: spans at their thread's last time, ranges at the process end.
  void finish() {
    TimeNs process_last = 0;
    for (const auto& thread : process_.threads)
      process_last = std::max(process_last, thread.last_time);
    for (size_t t = 0; t < open_spans_.size(); ++t) {
      auto& thread = process_.threads[t];
      for (uint32_t index : open_spans_[t]) {
        thread.spans[index].end = std::max(thread.spans[index].start, thread.last_time);
        thread.spans[index].flags |= kSpanUnclosed;
        ++process_.unclosed_spans;
      }
    }
    for (const auto& [id, where] : open_ranges_) {
      Span& span = process_.threads[where.first].spans[where.second];
      span.end = std::max(span.start, process_last);
      span.flags |= kSpanUnclosed;
      ++process_.unclosed_spans;
    }
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

  uint32_t thread_of(uint32_t stream) {
    if (stream < thread_by_stream_.size() && thread_by_stream_[stream] != kNoIndex) {
      return thread_by_stream_[stream];
    }
    // Stream ids are small recorder thread numbers; a huge one (a crafted file) goes to a map.
    constexpr uint32_t kDenseStreams = 1u << 16;
    if (stream >= kDenseStreams) {
      auto found = thread_by_large_stream_.find(stream);
      if (found != thread_by_large_stream_.end()) return found->second;
    }
    uint32_t index = static_cast<uint32_t>(process_.threads.size());
    process_.threads.emplace_back();
    process_.threads.back().stream = stream;
    open_spans_.emplace_back();
    if (stream >= kDenseStreams) {
      thread_by_large_stream_.emplace(stream, index);
    } else {
      if (stream >= thread_by_stream_.size()) thread_by_stream_.resize(stream + 1, kNoIndex);
      thread_by_stream_[stream] = index;
    }
    return index;
  }

  GpuStreamTrack& gpu_stream(uint32_t device, uint32_t stream) {
    uint64_t key = (uint64_t{device} << 32) | stream;
    auto [found, inserted] = gpu_stream_index_.try_emplace(key, process_.gpu_streams.size());
    if (inserted) {
      process_.gpu_streams.emplace_back();
      process_.gpu_streams.back().device = device;
      process_.gpu_streams.back().stream = stream;
    }
    return process_.gpu_streams[found->second];
  }

  CommunicatorTrack& communicator(uint64_t comm_id) {
    auto [found, inserted] = comm_index_.try_emplace(comm_id, process_.communicators.size());
    if (inserted) {
      process_.communicators.emplace_back();
      process_.communicators.back().comm_id = comm_id;
    }
    return process_.communicators[found->second];
  }

  static TimeNs end_or_start(uint64_t start, uint64_t end) {
    return static_cast<TimeNs>(end >= start ? end : start);
  }

  void read_record(uint32_t stream, const RecordView& record) {
    const trace::RecordHeader& header = record.header();
    const TimeNs time = static_cast<TimeNs>(header.time);
    switch (record.kind()) {
      case RecordKind::kString: {
        auto string = record.as<trace::StringRecord>();
        uint32_t length = std::min(string.length, record.tail_bytes<trace::StringRecord>());
        out_.file_strings[header.name].assign(
            reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), length);
        return;
      }
      case RecordKind::kStats: {
        auto stats = record.as<trace::StatsRecord>();
        process_.dropped_events = stats.dropped_events + stats.dropped_gpu_records;
        return;
      }
      default:
        break;
    }
    ++process_.events;
    ++process_.events_per_kind[header.kind & 31];
    switch (record.kind()) {
      case RecordKind::kSpanBegin: {
        uint32_t t = thread_of(stream);
        auto& thread = process_.threads[t];
        Span span;
        span.start = time;
        span.end = time;
        span.name = header.name;
        span.domain = record.as<trace::SpanBeginRecord>().domain;
        open_spans_[t].push_back(static_cast<uint32_t>(thread.spans.size()));
        thread.spans.push_back(span);
        touch(thread, time);
        break;
      }
      case RecordKind::kSpanEnd: {
        uint32_t t = thread_of(stream);
        auto& thread = process_.threads[t];
        touch(thread, time);
        if (open_spans_[t].empty()) {
          ++process_.unmatched_span_ends;
          break;
        }
        Span& span = thread.spans[open_spans_[t].back()];
        span.end = std::max(span.start, time);
        open_spans_[t].pop_back();
        break;
      }
      case RecordKind::kSpanComplete: {
        auto complete = record.as<trace::SpanCompleteRecord>();
        auto& thread = process_.threads[thread_of(stream)];
        Span span;
        span.start = time;
        span.end = end_or_start(header.time, complete.end_time);
        span.name = header.name;
        span.domain = complete.domain;
        span.flags = kSpanComplete;
        thread.spans.push_back(span);
        touch(thread, span.end);
        break;
      }
      case RecordKind::kRangeStart: {
        auto range = record.as<trace::RangeStartRecord>();
        uint32_t t = thread_of(stream);
        auto& thread = process_.threads[t];
        Span span;
        span.start = time;
        span.end = time;
        span.name = header.name;
        span.domain = range.domain;
        span.flags = kSpanFromRange;
        open_ranges_[range.range_id] = {t, static_cast<uint32_t>(thread.spans.size())};
        thread.spans.push_back(span);
        touch(thread, time);
        break;
      }
      case RecordKind::kRangeEnd: {
        auto range = record.as<trace::RangeEndRecord>();
        touch(process_.threads[thread_of(stream)], time);
        auto found = open_ranges_.find(range.range_id);
        if (found == open_ranges_.end()) {
          ++process_.unmatched_range_ends;
          break;
        }
        Span& span = process_.threads[found->second.first].spans[found->second.second];
        span.end = std::max(span.start, time);
        open_ranges_.erase(found);
        break;
      }
      case RecordKind::kInstant: {
        auto& thread = process_.threads[thread_of(stream)];
        thread.instants.push_back({time, header.name, record.as<trace::InstantRecord>().domain});
        touch(thread, time);
        break;
      }
      case RecordKind::kCounter: {
        auto [found, inserted] = counter_index_.try_emplace(header.name, process_.counters.size());
        if (inserted) {
          process_.counters.emplace_back();
          process_.counters.back().name = header.name;
        }
        auto& counter = process_.counters[found->second];
        counter.times.push_back(time);
        counter.values.push_back(record.as<trace::CounterRecord>().value);
        break;
      }
      case RecordKind::kFlow: {
        auto flow = record.as<trace::FlowRecord>();
        uint32_t t = thread_of(stream);
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
        break;
      }
      case RecordKind::kApiCall: {
        auto call = record.as<trace::ApiCallRecord>();
        auto& thread = process_.threads[thread_of(stream)];
        thread.api_calls.push_back(
            {time, end_or_start(header.time, call.end_time), header.name, call.correlation_id});
        touch(thread, thread.api_calls.back().end);
        break;
      }
      case RecordKind::kGpuKernel: {
        auto kernel = record.as<trace::GpuKernelRecord>();
        auto& track = gpu_stream(kernel.device, kernel.stream);
        GpuOp op;
        op.start = time;
        op.end = end_or_start(header.time, kernel.end_time);
        op.name = header.name;
        op.correlation_id = kernel.correlation_id;
        op.kind = GpuOpKind::kKernel;
        op.detail = static_cast<uint32_t>(track.kernel_details.size());
        KernelDetail detail;
        std::memcpy(detail.grid, kernel.grid, sizeof(detail.grid));
        std::memcpy(detail.block, kernel.block, sizeof(detail.block));
        detail.shared_memory_bytes = kernel.shared_memory_bytes;
        detail.registers_per_thread = kernel.registers_per_thread;
        detail.context = kernel.context;
        track.kernel_details.push_back(detail);
        track.ops.push_back(op);
        break;
      }
      case RecordKind::kGpuCopy: {
        auto copy = record.as<trace::GpuCopyRecord>();
        GpuOp op;
        op.start = time;
        op.end = end_or_start(header.time, copy.end_time);
        op.correlation_id = copy.correlation_id;
        op.bytes = copy.bytes;
        op.kind = copy.is_memset ? GpuOpKind::kMemset : GpuOpKind::kMemcpy;
        op.copy_kind = copy.copy_kind;
        op.name = header.name ? header.name : out_.intern_extra(copy_name(op));
        gpu_stream(copy.device, copy.stream).ops.push_back(op);
        break;
      }
      case RecordKind::kGpuSync: {
        auto sync = record.as<trace::GpuSyncRecord>();
        GpuOp op;
        op.start = time;
        op.end = end_or_start(header.time, sync.end_time);
        op.correlation_id = sync.correlation_id;
        op.kind = GpuOpKind::kSync;
        op.copy_kind = static_cast<uint8_t>(sync.sync_kind);
        op.name = out_.intern_extra(sync_name(sync.sync_kind));
        // Host waits overlap the stream's work: they get the device's own track.
        op.detail = sync.sync_kind == 1 /*device*/ ? kAllStreams : sync.stream;
        gpu_stream(sync.device, kAllStreams).ops.push_back(op);
        // The waiting thread is where the sync was recorded: its time moves on.
        touch(process_.threads[thread_of(stream)], op.end);
        break;
      }
      case RecordKind::kMemory: {
        auto memory = record.as<trace::MemoryRecord>();
        MemoryEvent event;
        event.time = time;
        event.address = memory.address;
        event.bytes = memory.is_free ? -static_cast<int64_t>(memory.bytes)
                                     : static_cast<int64_t>(memory.bytes);
        event.device = memory.device;
        event.category = memory.category < kNumMemoryCategories ? memory.category : 0;
        event.is_free = memory.is_free ? 1 : 0;
        process_.memory_events.push_back(event);
        break;
      }
      case RecordKind::kCommOp: {
        auto comm = record.as<trace::CommOpRecord>();
        auto& track = communicator(comm.comm_id);
        CommOp op;
        op.enqueue = time;
        op.start = comm.start_time ? static_cast<TimeNs>(comm.start_time) : time;
        if (comm.end_time && comm.end_time >= static_cast<uint64_t>(op.start)) {
          op.end = static_cast<TimeNs>(comm.end_time);
        } else {
          op.end = op.start;
          op.flags |= kCommEndUnknown;
        }
        op.name = header.name;
        op.kind = comm.kind;
        op.bytes = comm.bytes;
        op.count = comm.count;
        op.group_id = comm.group_id;
        op.rank = comm.rank;
        op.num_ranks = comm.num_ranks;
        op.peer = comm.peer;
        op.root = comm.root;
        op.device = comm.device;
        op.stream = comm.stream;
        op.sequence = comm.sequence;
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
        track.num_ranks = std::max(track.num_ranks, comm.num_ranks);
        track.ops.push_back(op);
        break;
      }
      case RecordKind::kExpertLoad: {
        auto load = record.as<trace::ExpertLoadRecord>();
        uint32_t experts = std::min<uint32_t>(
            load.num_experts, record.tail_bytes<trace::ExpertLoadRecord>() / sizeof(uint32_t));
        ExpertLoadSample sample;
        sample.time = time;
        sample.step = load.step;
        sample.layer = load.layer;
        sample.rank = load.rank;
        sample.scope = load.scope;
        sample.num_experts = experts;
        sample.dropped_tokens = load.dropped_tokens;
        sample.offset = static_cast<uint32_t>(out_.expert_tokens.size());
        out_.expert_tokens.resize(out_.expert_tokens.size() + experts);
        std::memcpy(out_.expert_tokens.data() + sample.offset,
                    record.tail<trace::ExpertLoadRecord>(), experts * sizeof(uint32_t));
        out_.expert_loads.push_back(sample);
        break;
      }
      case RecordKind::kExpertValues: {
        auto values = record.as<trace::ExpertValuesRecord>();
        uint32_t experts = std::min<uint32_t>(
            values.num_experts, record.tail_bytes<trace::ExpertValuesRecord>() / sizeof(float));
        ExpertValuesSample sample;
        sample.time = time;
        sample.step = values.step;
        sample.layer = values.layer;
        sample.rank = values.rank;
        sample.quantity = values.quantity;
        sample.num_experts = experts;
        sample.offset = static_cast<uint32_t>(out_.expert_value_data.size());
        out_.expert_value_data.resize(out_.expert_value_data.size() + experts);
        std::memcpy(out_.expert_value_data.data() + sample.offset,
                    record.tail<trace::ExpertValuesRecord>(), experts * sizeof(float));
        out_.expert_values.push_back(sample);
        break;
      }
      case RecordKind::kLayerStats: {
        auto stats = record.as<trace::LayerStatsRecord>();
        LayerStatsSample sample;
        sample.time = time;
        sample.step = stats.step;
        sample.layer = stats.layer;
        sample.rank = stats.rank;
        sample.aux_loss = stats.aux_loss;
        sample.z_loss = stats.z_loss;
        sample.router_entropy = stats.router_entropy;
        sample.max_over_mean = stats.max_over_mean;
        sample.nonfinite_logits = stats.nonfinite_logits;
        sample.nonfinite_outputs = stats.nonfinite_outputs;
        out_.layer_stats.push_back(sample);
        break;
      }
      case RecordKind::kStep:
        process_.step_markers.push_back({record.as<trace::StepRecord>().step, time});
        break;
      case RecordKind::kRebalance: {
        auto rebalance = record.as<trace::RebalanceRecord>();
        RebalanceDecision decision;
        decision.time = time;
        decision.step = rebalance.step;
        decision.layer = rebalance.layer;
        decision.rank = rebalance.rank;
        decision.imbalance_before = rebalance.imbalance_before;
        decision.imbalance_after = rebalance.imbalance_after;
        decision.bytes_moved = rebalance.bytes_moved;
        decision.duration_ns = rebalance.duration_ns;
        decision.applied = rebalance.applied != 0;
        out_.rebalances.push_back(decision);
        break;
      }
      case RecordKind::kThreadInfo: {
        auto& thread = process_.threads[thread_of(stream)];
        thread.name = header.name;
        thread.os_thread_id = record.as<trace::ThreadInfoRecord>().os_thread_id;
        break;
      }
      case RecordKind::kClockSync:
        process_.clock_sync_points.push_back({record.as<trace::ClockSyncRecord>().sync_id, time});
        break;
      default:
        break;
    }
  }

  static void touch(CpuThreadTrack& thread, TimeNs time) {
    if (time > thread.last_time) thread.last_time = time;
  }

  static std::string copy_name(const GpuOp& op) {
    if (op.kind == GpuOpKind::kMemset) return "Memset";
    static const char* const kNames[] = {"Memcpy",      "Memcpy HtoD", "Memcpy DtoH",
                                         "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"};
    return op.copy_kind < 6 ? kNames[op.copy_kind] : "Memcpy";
  }
  static std::string sync_name(uint32_t sync_kind) {
    switch (sync_kind) {
      case 1:
        return "cudaDeviceSynchronize";
      case 2:
        return "cudaStreamSynchronize";
      case 3:
        return "cudaEventSynchronize";
      case 4:
        return "cudaStreamWaitEvent";
      default:
        return "Synchronize";
    }
  }

  FileLoad& out_;
  ProcessTrack& process_;
  std::vector<uint32_t> thread_by_stream_;
  std::unordered_map<uint32_t, uint32_t> thread_by_large_stream_;
  std::vector<std::vector<uint32_t>> open_spans_;  // per thread track: indices of open spans
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> open_ranges_;
  std::unordered_map<uint64_t, size_t> gpu_stream_index_;
  std::unordered_map<uint64_t, size_t> comm_index_;
  std::unordered_map<uint32_t, size_t> counter_index_;
  std::unordered_map<uint64_t, FlowEnds> flow_ends_;
};

}  // namespace

uint32_t FileLoad::intern_extra(std::string_view text) {
  auto [found, inserted] =
      extra_index.try_emplace(std::string(text), static_cast<uint32_t>(extra_strings.size()));
  if (inserted) extra_strings.emplace_back(text);
  return kLocalExtraBit | found->second;
}

FileLoad load_moetrace_file(const std::string& path, const BytesProgress& progress,
                            const std::atomic<bool>* cancel, bool pipelined) {
  FileLoad out;
  out.process.file = path;
  out.process.source_format = "moetrace";
  trace::TraceReader reader;
  out.opened = reader.open(path);
  if (out.opened) {
    MoetraceFileLoader loader(out);
    loader.read_metadata(reader.metadata_json());
    std::vector<bool> seen_streams;
    auto consume = [&](const trace::Chunk& chunk) {
      loader.read_chunk(chunk);
      ++out.process.chunks;
      if (chunk.stream < (1u << 20)) {
        if (chunk.stream >= seen_streams.size()) seen_streams.resize(chunk.stream + 1);
        if (!seen_streams[chunk.stream]) ++out.process.streams;
        seen_streams[chunk.stream] = true;
      }
    };
    trace::Chunk chunk;
    if (pipelined) {
      ChunkPipeline pipeline(reader, cancel, progress);
      while (pipeline.next(chunk)) consume(chunk);
      pipeline.join();
    } else {
      uint64_t reported = 0;
      while ((!cancel || !cancel->load(std::memory_order_relaxed)) && reader.next_chunk(chunk)) {
        consume(chunk);
        if (progress && reader.position() - reported >= (4u << 20)) {
          reported = reader.position();
          progress(reported, reader.file_size());
        }
      }
    }
    if (cancel && cancel->load(std::memory_order_relaxed)) {
      out.errors.push_back({path, reader.position(), "loading cancelled"});
    }
    loader.finish();
    out.process.complete = reader.saw_end();
    if (progress) progress(reader.file_size(), reader.file_size());
  }
  for (const trace::ReadError& error : reader.errors()) {
    out.errors.push_back({error.file.empty() ? path : error.file, error.offset, error.message});
  }
  if (out.opened) finalize_process(out);
  return out;
}

}  // namespace moescope::analysis
