// Streams a TraceModel as Chrome trace JSON (see chrome_export.h for the layout).
#include "moescope/analysis/chrome_export.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "json_stream.h"
#include "moescope/analysis/comm_analysis.h"
#include "moescope/trace/time_arithmetic.h"

namespace moescope::analysis {
namespace {

constexpr int64_t kGpuTidBase = 1000000;
constexpr int64_t kCommTidBase = 2000000;

class Exporter {
 public:
  Exporter(const TraceModel& model, JsonStream& out, const ChromeExportOptions& options)
      : model_(model), out_(out), options_(options) {}

  void run() {
    const ProcessTrack* first = nullptr;
    for (const auto& process : model_.processes) {
      if (options_.only_rank < 0 || process.rank == options_.only_rank) {
        first = &process;
        break;
      }
    }
    int32_t world = 0;
    for (const auto& process : model_.processes) world = std::max(world, process.world_size);
    world = std::max<int32_t>(world, int32_t(model_.processes.size()));
    bool gpu = false;
    for (const auto& process : model_.processes) gpu |= !process.gpu_streams.empty();
    out_.raw("{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ns\",\n\"distributedInfo\": ");
    out_.raw("{\"backend\": ");
    out_.string(gpu ? "nccl" : "gloo");
    out_.raw(", \"rank\": ");
    out_.integer(first ? first->rank : 0);
    out_.raw(", \"world_size\": ");
    out_.integer(world);
    out_.raw("},\n\"deviceProperties\": [],\n\"traceEvents\": [\n");
    for (uint32_t p = 0; p < model_.processes.size(); ++p) {
      const ProcessTrack& process = model_.processes[p];
      if (options_.only_rank >= 0 && process.rank != options_.only_rank) continue;
      write_process(p, process);
    }
    // Flows recorded with moescope_flow.
    if (options_.flows) {
      for (size_t i = 0; i < model_.flows.size(); ++i) {
        const FlowArrow& flow = model_.flows[i];
        const ProcessTrack& from = model_.processes[flow.from.process];
        const ProcessTrack& to = model_.processes[flow.to.process];
        if (options_.only_rank >= 0 &&
            (from.rank != options_.only_rank || to.rank != options_.only_rank)) {
          continue;
        }
        uint64_t id = (uint64_t{1} << 62) | i;
        flow_point('s', id, from.rank, thread_tid(from.threads[flow.from.track]), flow.from_time,
                   "flow");
        flow_point('f', id, to.rank, thread_tid(to.threads[flow.to.track]), flow.to_time, "flow");
      }
    }
    // A last metadata event closes the array without a trailing comma.
    out_.raw("{\"name\": \"moescope_export\", \"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"args\": ");
    out_.raw("{\"events\": ");
    out_.unsigned_integer(out_.events());
    out_.raw("}}\n]\n}\n");
  }

 private:
  static int64_t thread_tid(const CpuThreadTrack& thread) {
    return thread.os_thread_id ? int64_t(thread.os_thread_id) : int64_t(thread.stream);
  }
  static int64_t stream_tid(const GpuStreamTrack& stream) {
    uint32_t id = stream.stream == kAllStreams ? 999 : stream.stream % 1000;
    return kGpuTidBase + int64_t(stream.device) * 1000 + id;
  }

  void head(const char* phase, int32_t pid, int64_t tid) {
    out_.raw("{\"ph\": \"");
    out_.raw(phase);
    out_.raw("\", \"pid\": ");
    out_.integer(pid);
    out_.raw(", \"tid\": ");
    out_.integer(tid);
  }
  void name_and_cat(std::string_view name, std::string_view category) {
    out_.raw(", \"name\": ");
    out_.string(name);
    out_.raw(", \"cat\": ");
    out_.string(category);
  }
  void times(TimeNs start, TimeNs end) {
    out_.raw(", \"ts\": ");
    out_.micros(start);
    out_.raw(", \"dur\": ");
    out_.micros(trace::saturating_duration(start, end));
  }
  void metadata(const char* what, int32_t pid, int64_t tid, std::string_view key,
                std::string_view text) {
    head("M", pid, tid);
    out_.raw(", \"name\": \"");
    out_.raw(what);
    out_.raw("\", \"args\": {\"");
    out_.raw(key);
    out_.raw("\": ");
    out_.string(text);
    out_.raw("}");
    out_.end_event();
  }
  void sort_index(const char* what, int32_t pid, int64_t tid, int64_t index) {
    head("M", pid, tid);
    out_.raw(", \"name\": \"");
    out_.raw(what);
    out_.raw("\", \"args\": {\"sort_index\": ");
    out_.integer(index);
    out_.raw("}");
    out_.end_event();
  }
  void flow_point(char phase, uint64_t id, int32_t pid, int64_t tid, TimeNs time,
                  const char* category) {
    const char text[2] = {phase, 0};
    head(text, pid, tid);
    out_.raw(", \"id\": ");
    out_.unsigned_integer(id);
    out_.raw(", \"name\": \"");
    out_.raw(category);
    out_.raw("\", \"cat\": \"");
    out_.raw(category);
    out_.raw("\", \"ts\": ");
    out_.micros(time);
    if (phase == 'f') out_.raw(", \"bp\": \"e\"");
    out_.end_event();
  }

  void write_process(uint32_t index, const ProcessTrack& process) {
    const int32_t pid = process.rank;
    std::string label = "rank " + std::to_string(process.rank);
    if (!process.host.empty())
      label += " (" + process.host + ", pid " + std::to_string(process.pid) + ")";
    metadata("process_name", pid, 0, "name", label);
    metadata("process_labels", pid, 0, "labels", process.file);
    sort_index("process_sort_index", pid, 0, process.rank);
    int64_t order = 0;
    for (const auto& thread : process.threads) {
      const int64_t tid = thread_tid(thread);
      std::string name = model_.name(thread.name);
      if (name.empty()) name = "thread " + std::to_string(tid);
      metadata("thread_name", pid, tid, "name", name);
      sort_index("thread_sort_index", pid, tid, order++);
      for (const Span& span : thread.spans) {
        head("X", pid, tid);
        name_and_cat(model_.name(span.name), "user_annotation");
        times(span.start, span.end);
        if (span.domain || span.flags) {
          out_.raw(", \"args\": {");
          bool comma = false;
          if (span.domain) {
            out_.raw("\"domain\": ");
            out_.string(model_.name(span.domain));
            comma = true;
          }
          if (span.flags & kSpanUnclosed)
            out_.raw(comma ? ", \"unclosed\": true" : "\"unclosed\": true");
          out_.raw("}");
        }
        out_.end_event();
      }
      for (const ApiCall& call : thread.api_calls) {
        head("X", pid, tid);
        name_and_cat(model_.name(call.name), "cuda_runtime");
        times(call.start, call.end);
        out_.raw(", \"args\": {\"correlation\": ");
        out_.unsigned_integer(call.correlation_id);
        out_.raw("}");
        out_.end_event();
      }
      for (const Instant& instant : thread.instants) {
        head("i", pid, tid);
        name_and_cat(model_.name(instant.name), "instant");
        out_.raw(", \"s\": \"t\", \"ts\": ");
        out_.micros(instant.time);
        out_.end_event();
      }
    }
    for (const auto& stream : process.gpu_streams) {
      const int64_t tid = stream_tid(stream);
      std::string name = stream.stream == kAllStreams
                             ? "device " + std::to_string(stream.device) + " synchronizations"
                             : "stream " + std::to_string(stream.stream) + " (device " +
                                   std::to_string(stream.device) + ")";
      metadata("thread_name", pid, tid, "name", name);
      sort_index("thread_sort_index", pid, tid, order++);
      for (const GpuOp& op : stream.ops) write_gpu_op(process, pid, tid, stream, op);
    }
    for (size_t c = 0; c < process.communicators.size(); ++c) {
      const CommunicatorTrack& comm = process.communicators[c];
      const int64_t tid = kCommTidBase + int64_t(c);
      char id[32];
      std::snprintf(id, sizeof(id), "%llx", static_cast<unsigned long long>(comm.comm_id));
      metadata("thread_name", pid, tid, "name", std::string("communicator ") + id);
      sort_index("thread_sort_index", pid, tid, order++);
      for (const CommOp& op : comm.ops) {
        head("X", pid, tid);
        const std::string& op_name = model_.name(op.name);
        name_and_cat(op_name.empty() ? comm_kind_name(op.kind) : op_name, "communication");
        times(op.start, op.end);
        out_.raw(", \"args\": {\"kind\": ");
        out_.string(comm_kind_name(op.kind));
        out_.raw(", \"bytes\": ");
        out_.unsigned_integer(op.bytes);
        out_.raw(", \"rank\": ");
        out_.integer(op.rank);
        out_.raw(", \"num_ranks\": ");
        out_.integer(op.num_ranks);
        out_.raw(", \"sequence\": ");
        out_.unsigned_integer(op.sequence);
        if (op.peer >= 0) {
          out_.raw(", \"peer\": ");
          out_.integer(op.peer);
        }
        if (op.num_splits) {
          out_.raw(", \"split_bytes\": [");
          auto splits = comm.splits(op);
          for (size_t i = 0; i < splits.size(); ++i) {
            if (i) out_.raw(", ");
            out_.unsigned_integer(splits[i]);
          }
          out_.raw("]");
        }
        if (op.flags & kCommEndUnknown) out_.raw(", \"end_unknown\": true");
        out_.raw("}");
        out_.end_event();
      }
    }
    // A collective still open a second after its rank entered it (collective_open): a line
    // across the rank where it started to wait; in a hung job, what it waits in.
    for (const CollectiveOpen& open : process.collectives_open) {
      head("i", pid, 0);
      name_and_cat(std::string("waiting in ") + comm_kind_name(open.kind) + " #" +
                       std::to_string(open.sequence),
                   "collective_open");
      out_.raw(", \"s\": \"p\", \"ts\": ");
      out_.micros(open.time);
      char args[128];  // numbers only: nothing to escape
      std::snprintf(args, sizeof(args),
                    ", \"args\": {\"communicator\": \"%llx\", \"sequence\": %u, \"bytes\": %llu}",
                    static_cast<unsigned long long>(open.comm_id), open.sequence,
                    static_cast<unsigned long long>(open.bytes));
      out_.raw(args);
      out_.end_event();
    }
    if (options_.counters) write_counters(index, process, pid);
  }

  void write_gpu_op(const ProcessTrack& process, int32_t pid, int64_t tid,
                    const GpuStreamTrack& stream, const GpuOp& op) {
    static const char* const kCategories[] = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"};
    head("X", pid, tid);
    name_and_cat(model_.name(op.name), kCategories[static_cast<int>(op.kind)]);
    times(op.start, op.end);
    out_.raw(", \"args\": {\"device\": ");
    out_.unsigned_integer(stream.device);
    // HTA takes events with args.stream as GPU work; host syncs are not.
    out_.raw(op.kind == GpuOpKind::kSync ? ", \"cuda_stream\": " : ", \"stream\": ");
    if (op.kind == GpuOpKind::kSync) {
      out_.integer(op.detail == kAllStreams ? -2 : int64_t(op.detail));
    } else {
      out_.integer(stream.stream == kAllStreams ? -2 : int64_t(stream.stream));
    }
    out_.raw(", \"correlation\": ");
    out_.unsigned_integer(op.correlation_id);
    if (op.kind == GpuOpKind::kMemcpy || op.kind == GpuOpKind::kMemset) {
      out_.raw(", \"bytes\": ");
      out_.unsigned_integer(op.bytes);
    }
    if (op.kind == GpuOpKind::kKernel && op.detail < stream.kernel_details.size()) {
      const KernelDetail& detail = stream.kernel_details[op.detail];
      out_.raw(", \"grid\": [");
      for (int i = 0; i < 3; ++i) {
        if (i) out_.raw(", ");
        out_.unsigned_integer(detail.grid[i]);
      }
      out_.raw("], \"block\": [");
      for (int i = 0; i < 3; ++i) {
        if (i) out_.raw(", ");
        out_.unsigned_integer(detail.block[i]);
      }
      out_.raw("], \"shared memory\": ");
      out_.unsigned_integer(detail.shared_memory_bytes);
      out_.raw(", \"registers per thread\": ");
      out_.unsigned_integer(detail.registers_per_thread);
    }
    out_.raw("}");
    out_.end_event();
    if (options_.flows && op.launch_thread != kNoIndex) {
      const CpuThreadTrack& thread = process.threads[op.launch_thread];
      const ApiCall& call = thread.api_calls[op.launch_call];
      uint64_t id = (uint64_t(uint32_t(process.rank)) << 32) | op.correlation_id;
      flow_point('s', id, pid, thread_tid(thread), call.start, "ac2g");
      flow_point('f', id, pid, tid, op.start, "ac2g");
    }
  }

  void write_counters(uint32_t index, const ProcessTrack& process, int32_t pid) {
    for (const CounterTrack& counter : process.counters) {
      const std::string& name = model_.name(counter.name);
      for (size_t i = 0; i < counter.times.size(); ++i) {
        head("C", pid, 0);
        out_.raw(", \"name\": ");
        out_.string(name);
        out_.raw(", \"ts\": ");
        out_.micros(counter.times[i]);
        out_.raw(", \"args\": {\"value\": ");
        out_.number(counter.values[i]);
        out_.raw("}");
        out_.end_event();
      }
    }
    const MemoryUsage& usage = process.memory_usage;
    for (size_t i = 0; i < usage.times.size(); ++i) {
      head("C", pid, 0);
      out_.raw(", \"name\": \"memory in use (MiB)\", \"ts\": ");
      out_.micros(usage.times[i]);
      out_.raw(", \"args\": {");
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        if (c) out_.raw(", ");
        out_.raw("\"");
        out_.raw(memory_category_name(c));
        out_.raw("\": ");
        out_.number(double(usage.by_category[c][i]) / (1 << 20));
      }
      out_.raw("}");
      out_.end_event();
    }
    for (const ExpertLoadSample& sample : model_.expert_loads) {
      if (sample.process != index) continue;
      head("C", pid, 0);
      out_.raw(", \"name\": \"expert tokens layer ");
      out_.unsigned_integer(sample.layer);
      out_.raw(sample.scope == 1 ? " (global)" : sample.scope == 2 ? " (received)" : " (local)");
      out_.raw("\", \"ts\": ");
      out_.micros(sample.time);
      out_.raw(", \"args\": {");
      auto tokens = model_.tokens(sample);
      for (size_t e = 0; e < tokens.size(); ++e) {
        if (e) out_.raw(", ");
        out_.raw("\"e");
        out_.unsigned_integer(e);
        out_.raw("\": ");
        out_.unsigned_integer(tokens[e]);
      }
      out_.raw("}");
      out_.end_event();
    }
  }

  const TraceModel& model_;
  JsonStream& out_;
  const ChromeExportOptions& options_;
};

}  // namespace

ChromeExportResult export_chrome_trace(const TraceModel& model, std::FILE* out,
                                       const ChromeExportOptions& options) {
  ChromeExportResult result;
  JsonStream stream(out);
  Exporter(model, stream, options).run();
  result.ok = stream.finish();
  result.error = stream.error();
  result.events = stream.events();
  result.bytes = stream.bytes();
  return result;
}

ChromeExportResult export_chrome_trace(const TraceModel& model, const std::string& path,
                                       const ChromeExportOptions& options) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) {
    ChromeExportResult result;
    result.error = path + ": cannot create: " + std::strerror(errno);
    return result;
  }
  ChromeExportResult result = export_chrome_trace(model, file, options);
  if (std::fclose(file) != 0 && result.ok) {
    result.ok = false;
    result.error = std::strerror(errno);
  }
  if (!result.ok) result.error = path + ": write failed: " + result.error;
  return result;
}

}  // namespace moescope::analysis
