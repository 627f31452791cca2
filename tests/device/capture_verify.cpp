// Checks the traces of the GPU capture check (tests/device/capture_run.sh) on the GPU machine.
//
//   capture_verify torch TRACE BYTES   a torch CUDA program (capture_torch_program.py): kernels,
//                                      memcpys and allocations, each correlated to its launch
//                                      API call, on the host clock
//   capture_verify nccl TRACE BYTES    a 1-rank NCCL communicator (capture_nccl_program.py):
//                                      all-reduce and all-to-all with GPU completion times,
//                                      c10d's collectives through the C++ torch capture, and
//                                      the collective_open record of an all-reduce held 2 s
//   capture_verify graph TRACE REPLAYS a graph-captured matmul + all-reduce replayed REPLAYS
//                                      times (capture_graph_program.py)
//   capture_verify restart TRACE BYTES the second recording of one process
//                                      (capture_restart_program.py): GPU activity, the last
//                                      DtoH copy, the exit flush before CUDA's teardown
//   capture_verify profiler TRACE N    the program ran torch.profiler with CUDA activities
//                                      (capture_profiler_program.py): what moescope kept
//
// Prints one line per check ("ok" / "FAILED") and a few figures; exit status 1 if any failed.
// Built with g++ against the trace library only (no GTest on the GPU machine).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "moescope/recorder.h"
#include "moescope/trace/trace_format.h"
#include "moescope/trace/trace_reader.h"

namespace trace = moescope::trace;

namespace {

struct Loaded {
  std::map<uint32_t, std::string> strings;
  std::vector<trace::GpuKernelRecord> kernels;
  std::vector<trace::GpuCopyRecord> copies;
  std::vector<trace::MemoryRecord> memory;
  std::vector<trace::GpuSyncRecord> syncs;
  std::vector<trace::ApiCallRecord> api_calls;
  std::vector<trace::CommOpRecord> comm_ops;
  std::vector<trace::CollectiveOpenRecord> collectives_open;
  std::vector<trace::InstantRecord> instants;
  uint64_t dropped_gpu_records = 0;
  size_t read_errors = 0;
  std::string name(uint32_t id) const {
    auto found = strings.find(id);
    return found == strings.end() ? "" : found->second;
  }
};

Loaded load(const std::string& path) {
  Loaded loaded;
  trace::TraceReader reader;
  if (!reader.open(path)) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    std::exit(2);
  }
  trace::Chunk chunk;
  while (reader.next_chunk(chunk)) {
    for (trace::RecordView record : chunk) {
      switch (record.kind()) {
        case trace::RecordKind::kString: {
          auto string = record.as<trace::StringRecord>();
          loaded.strings[string.header.name] = std::string(
              reinterpret_cast<const char*>(record.tail<trace::StringRecord>()), string.length);
          break;
        }
        case trace::RecordKind::kGpuKernel:
          loaded.kernels.push_back(record.as<trace::GpuKernelRecord>());
          break;
        case trace::RecordKind::kGpuCopy:
          loaded.copies.push_back(record.as<trace::GpuCopyRecord>());
          break;
        case trace::RecordKind::kMemory:
          loaded.memory.push_back(record.as<trace::MemoryRecord>());
          break;
        case trace::RecordKind::kGpuSync:
          loaded.syncs.push_back(record.as<trace::GpuSyncRecord>());
          break;
        case trace::RecordKind::kApiCall:
          loaded.api_calls.push_back(record.as<trace::ApiCallRecord>());
          break;
        case trace::RecordKind::kCommOp:
          loaded.comm_ops.push_back(record.as<trace::CommOpRecord>());
          break;
        case trace::RecordKind::kCollectiveOpen:
          loaded.collectives_open.push_back(record.as<trace::CollectiveOpenRecord>());
          break;
        case trace::RecordKind::kInstant:
          loaded.instants.push_back(record.as<trace::InstantRecord>());
          break;
        case trace::RecordKind::kStats:
          loaded.dropped_gpu_records = std::max(
              loaded.dropped_gpu_records, record.as<trace::StatsRecord>().dropped_gpu_records);
          break;
        default:
          break;
      }
    }
  }
  loaded.read_errors = reader.errors().size();
  std::sort(loaded.comm_ops.begin(), loaded.comm_ops.end(),
            [](const auto& a, const auto& b) { return a.header.time < b.header.time; });
  return loaded;
}

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("  %-6s %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++g_failures;
}

std::string ms(int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(ns) / 1e6);
  return text;
}

void common_checks(const Loaded& loaded) {
  check(loaded.read_errors == 0, "trace reads without errors");
  check(loaded.dropped_gpu_records == 0,
        "no GPU records dropped (" + std::to_string(loaded.dropped_gpu_records) + ")");
  bool gpu_off = false;
  for (const auto& instant : loaded.instants) {
    std::string text = loaded.name(instant.header.name);
    if (text.rfind("gpu capture off", 0) == 0) {
      gpu_off = true;
      std::printf("  note   %s\n", text.c_str());
    }
  }
  check(!gpu_off, "CUPTI was enabled (no 'gpu capture off' note)");
}

bool has_instant_starting(const Loaded& loaded, const std::string& prefix) {
  for (const auto& instant : loaded.instants) {
    if (loaded.name(instant.header.name).rfind(prefix, 0) == 0) return true;
  }
  return false;
}

void print_notes(const Loaded& loaded) {
  for (const auto& instant : loaded.instants) {
    std::printf("  note   %s\n", loaded.name(instant.header.name).c_str());
  }
}

// ---- torch: kernels, memcpys, allocations with correlation ----------------------------------
int verify_torch(const Loaded& loaded, uint64_t tensor_bytes) {
  common_checks(loaded);
  std::map<uint32_t, const trace::ApiCallRecord*> api_by_correlation;
  for (const auto& call : loaded.api_calls) api_by_correlation[call.correlation_id] = &call;
  std::printf("  %zu kernels, %zu copies, %zu memory events, %zu syncs, %zu API calls\n",
              loaded.kernels.size(), loaded.copies.size(), loaded.memory.size(),
              loaded.syncs.size(), loaded.api_calls.size());

  size_t matched = 0, before_launch = 0;
  int64_t worst_early_ns = 0;
  for (const auto& kernel : loaded.kernels) {
    auto found = api_by_correlation.find(kernel.correlation_id);
    if (found == api_by_correlation.end()) continue;
    ++matched;
    int64_t early =
        static_cast<int64_t>(found->second->header.time) - static_cast<int64_t>(kernel.header.time);
    if (early > 0) {
      ++before_launch;
      worst_early_ns = std::max(worst_early_ns, early);
    }
  }
  check(loaded.kernels.size() >= 6, "at least 6 kernels (fill + 5 matmuls)");
  check(!loaded.kernels.empty() && matched * 10 >= loaded.kernels.size() * 9,
        "kernels correlated to their launch API call: " + std::to_string(matched) + "/" +
            std::to_string(loaded.kernels.size()));
  // Same clock: a kernel cannot start before the host call that launched it.
  check(worst_early_ns <= 20'000, "no kernel starts before its launch call (worst " +
                                      ms(worst_early_ns) + ", " + std::to_string(before_launch) +
                                      " early)");
  for (int kind : {MOESCOPE_COPY_HTOD, MOESCOPE_COPY_DTOH}) {
    bool found = false, correlated = false;
    for (const auto& copy : loaded.copies) {
      if (copy.copy_kind != kind || copy.is_memset || copy.bytes != tensor_bytes) continue;
      found = true;
      correlated = correlated || api_by_correlation.count(copy.correlation_id) > 0;
    }
    std::string name = kind == MOESCOPE_COPY_HTOD ? "HtoD" : "DtoH";
    check(found, name + " memcpy of " + std::to_string(tensor_bytes) + " bytes");
    check(correlated, name + " memcpy correlated to its API call");
  }
  bool allocation = false;
  for (const auto& event : loaded.memory) {
    allocation = allocation || (!event.is_free && event.device >= 0 && event.bytes >= tensor_bytes);
  }
  check(allocation, "device allocation of at least the tensor size (CUPTI MEMORY2)");
  check(!loaded.syncs.empty(), "synchronization recorded (torch.cuda.synchronize)");
  return g_failures ? 1 : 0;
}

// ---- nccl: 1-rank communicator, GPU completion times ----------------------------------------
bool is_nccl_kernel(const Loaded& loaded, const trace::GpuKernelRecord& kernel) {
  return loaded.name(kernel.header.name).find("nccl") != std::string::npos;
}

int verify_nccl(const Loaded& loaded, uint64_t tensor_bytes) {
  common_checks(loaded);
  std::map<uint32_t, const trace::ApiCallRecord*> api_by_correlation;
  for (const auto& call : loaded.api_calls) api_by_correlation[call.correlation_id] = &call;

  const trace::CommOpRecord* init = nullptr;
  std::vector<const trace::CommOpRecord*> all_reduces, all_to_all;
  for (const auto& op : loaded.comm_ops) {
    std::printf(
        "  comm   %-22s kind %2u bytes %9llu rank %d/%d dev %d group %llu enqueue->start "
        "%s start->end %s\n",
        loaded.name(op.header.name).c_str(), op.kind, static_cast<unsigned long long>(op.bytes),
        op.rank, op.num_ranks, op.device, static_cast<unsigned long long>(op.group_id),
        ms(static_cast<int64_t>(op.start_time) - static_cast<int64_t>(op.header.time)).c_str(),
        op.end_time ? ms(static_cast<int64_t>(op.end_time - op.start_time)).c_str() : "unknown");
    if (op.kind == MOESCOPE_COMM_INIT && !init) init = &op;
    if (op.kind == MOESCOPE_COMM_ALL_REDUCE) all_reduces.push_back(&op);
    if (op.kind == MOESCOPE_COMM_ALL_TO_ALL || op.kind == MOESCOPE_COMM_SEND ||
        op.kind == MOESCOPE_COMM_RECV) {
      all_to_all.push_back(&op);
    }
  }
  check(init && init->num_ranks == 1 && init->rank == 0 && init->device == 0,
        "communicator init recorded (rank 0 of 1, device 0)");
  check(all_reduces.size() == 4,
        "4 all-reduces recorded (" + std::to_string(all_reduces.size()) + ")");
  bool all_timed = !all_reduces.empty();
  bool waited_for_compute = false;
  bool after_compute = true;
  size_t compared = 0;
  for (const auto* op : all_reduces) {
    all_timed = all_timed && op->end_time > 0 && op->end_time >= op->start_time &&
                op->start_time + 50'000 >= op->header.time && op->bytes == tensor_bytes;
    // The all-reduce waits for the matmuls launched before it: its GPU start comes after the
    // last of them ends (CUPTI kernel times, same clock), far later than its enqueue.
    uint64_t compute_end = 0;
    for (const auto& kernel : loaded.kernels) {
      auto launch = api_by_correlation.find(kernel.correlation_id);
      if (is_nccl_kernel(loaded, kernel) || launch == api_by_correlation.end()) continue;
      if (launch->second->header.time < op->header.time) {
        compute_end = std::max(compute_end, kernel.end_time);
      }
    }
    if (compute_end) {
      ++compared;
      std::printf(
          "  all-reduce GPU start - end of the matmuls before it: %s\n",
          ms(static_cast<int64_t>(op->start_time) - static_cast<int64_t>(compute_end)).c_str());
      after_compute = after_compute && op->start_time + 100'000 >= compute_end &&
                      op->start_time <= compute_end + 20'000'000;
    }
    waited_for_compute = waited_for_compute || op->start_time >= op->header.time + 5'000'000;
  }
  check(all_timed, "all-reduces carry GPU start/end times (end > 0, bytes " +
                       std::to_string(tensor_bytes) + ")");
  check(waited_for_compute,
        "GPU start is not the enqueue time (>= 5 ms later behind queued matmuls)");
  check(compared > 0 && after_compute,
        "all-reduce GPU start matches the end of the preceding matmuls (CUPTI)");
  bool a2a_timed = !all_to_all.empty();
  uint64_t group = all_to_all.empty() ? 0 : all_to_all.front()->group_id;
  for (const auto* op : all_to_all) {
    a2a_timed = a2a_timed && op->end_time > 0 && op->end_time >= op->start_time;
    if (op->kind != MOESCOPE_COMM_ALL_TO_ALL) a2a_timed = a2a_timed && op->group_id == group;
  }
  check(a2a_timed, "all-to-all recorded (ncclAlltoAll or grouped send/recv) with GPU times");
  // The last all-reduce waited ~2 s on the GPU behind a sleeping kernel: one collective_open
  // record names it (same communicator and sequence, entered at its enqueue), none names the
  // others, which completed within a second.
  const trace::CommOpRecord* held = all_reduces.empty() ? nullptr : all_reduces.back();
  for (const auto& open : loaded.collectives_open) {
    std::printf("  collective_open %s #%u comm %016llx entered %s before the held op's enqueue\n",
                loaded.name(open.header.name).c_str(), open.sequence,
                static_cast<unsigned long long>(open.comm_id),
                ms(static_cast<int64_t>(held ? held->header.time : 0) -
                   static_cast<int64_t>(open.header.time))
                    .c_str());
  }
  check(held && loaded.collectives_open.size() == 1 &&
            loaded.collectives_open[0].comm_id == held->comm_id &&
            loaded.collectives_open[0].sequence == held->sequence &&
            loaded.collectives_open[0].kind == MOESCOPE_COMM_ALL_REDUCE &&
            loaded.collectives_open[0].header.time + 5'000'000 >= held->header.time &&
            loaded.collectives_open[0].header.time <= held->header.time + 5'000'000,
        "the all-reduce held 2 s on the GPU has one collective_open record (" +
            std::to_string(loaded.collectives_open.size()) + " in the trace)");
  size_t nccl_kernels = 0;
  for (const auto& kernel : loaded.kernels) nccl_kernels += is_nccl_kernel(loaded, kernel);
  std::printf("  %zu NCCL kernels seen by CUPTI\n", nccl_kernels);
  // The bundle's libmoescope_torch_capture.so with its .torch_version: without them the
  // Python wrappers would stand in, silently (collectives.py notes which one ran).
  check(has_instant_starting(loaded, "collectives from c10d (C++ capture)"),
        "c10d collectives through the C++ torch capture (note 'collectives from c10d')");
  return g_failures ? 1 : 0;
}

// ---- graph: a captured step replayed -----------------------------------------------------------
int verify_graph(const Loaded& loaded, uint64_t replays) {
  common_checks(loaded);
  print_notes(loaded);
  size_t nccl_kernels = 0;
  for (const auto& kernel : loaded.kernels) nccl_kernels += is_nccl_kernel(loaded, kernel);
  std::printf("  %zu kernels, %zu NCCL kernels, %zu comm ops\n", loaded.kernels.size(),
              nccl_kernels, loaded.comm_ops.size());
  // Matmuls: 3 warm-up steps, then per replay the graph's own and the reference product (a
  // one-rank all-reduce may launch no kernel at all, so NCCL kernels are a figure, not a check).
  check(loaded.kernels.size() >= 3 + 2 * replays,
        "the replays' kernels are recorded through CUPTI (>= " + std::to_string(3 + 2 * replays) +
            " kernels)");
  check(has_instant_starting(loaded, "NCCL ops captured into a CUDA graph"),
        "the trace notes that the captured all-reduce's replays are not comm ops");
  return g_failures ? 1 : 0;
}

// ---- restart: the second recording of a process ----------------------------------------------
int verify_restart(const Loaded& loaded, uint64_t tensor_bytes) {
  common_checks(loaded);
  print_notes(loaded);
  std::printf("  %zu kernels, %zu copies in the second recording\n", loaded.kernels.size(),
              loaded.copies.size());
  check(loaded.kernels.size() >= 3, "the second recording has the matmul kernels (>= 3)");
  bool last_copy = false;
  for (const auto& copy : loaded.copies) {
    last_copy = last_copy || (copy.copy_kind == MOESCOPE_COPY_DTOH && copy.bytes == tensor_bytes);
  }
  check(last_copy, "the last DtoH copy before exit is in the trace (flushed in time)");
  check(has_instant_starting(loaded, "gpu capture flushed at exit before the CUDA runtime's"),
        "the exit flush ran before the CUDA runtime's teardown (the shim's note)");
  return g_failures ? 1 : 0;
}

// ---- profiler: torch.profiler next to moescope --------------------------------------------------
int verify_profiler(const Loaded& loaded, uint64_t profiler_events) {
  check(loaded.read_errors == 0, "trace reads without errors");
  print_notes(loaded);
  std::printf("  moescope: %zu kernels; torch.profiler: %llu CUDA events\n", loaded.kernels.size(),
              static_cast<unsigned long long>(profiler_events));
  check(profiler_events > 0, "the program's torch.profiler saw its CUDA kernels");
  check(!loaded.kernels.empty(), "moescope recorded kernels (at least those before the profiler)");
  return g_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: capture_verify torch|nccl|graph|restart|profiler TRACE NUMBER\n");
    return 2;
  }
  std::string mode = argv[1];
  uint64_t bytes = std::strtoull(argv[3], nullptr, 10);
  Loaded loaded = load(argv[2]);
  std::printf("%s: %s\n", mode.c_str(), argv[2]);
  if (mode == "torch") return verify_torch(loaded, bytes);
  if (mode == "nccl") return verify_nccl(loaded, bytes);
  if (mode == "graph") return verify_graph(loaded, bytes);
  if (mode == "restart") return verify_restart(loaded, bytes);
  if (mode == "profiler") return verify_profiler(loaded, bytes);
  std::fprintf(stderr, "unknown mode '%s' (expected torch, nccl, graph, restart or profiler)\n",
               mode.c_str());
  return 2;
}
