// analysis_bench: the trace model and its consumers on a synthetic multi-rank trace.
//   load     load_traces() events/s, vs a baseline that only decodes the same files with
//            TraceReader (decompress + delta decode + validate) in the same thread layout
//   memory   peak RSS growth while loading / uncompressed event bytes (target <= 3x)
//   report   build_report() seconds on the whole model (target < 5 s at 10 M events)
//   export   Chrome JSON MB/s (target >= 150 MB/s), vs writing the same bytes with fwrite
//
// Usage: analysis_bench [--events N] [--ranks R] [--dir DIR] [--keep]
// The trace per rank: steps of 2 layers, each with nested CPU spans, kernel launches + kernels
// on 2 streams, all-to-all comm ops with splits, memory alloc/free, counters, expert loads.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "moescope/analysis/chrome_export.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace {

using namespace moescope;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Resident set size now and its peak, in bytes (Linux /proc).
uint64_t status_field(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0)
      return std::strtoull(line.c_str() + std::strlen(field), nullptr, 10) * 1024;
  }
  return 0;
}
// CPU time of the whole process (every thread): user, system (page faults land here) and the
// minor page faults, so a load is judged by its CPU cost and not only by wall time.
struct CpuUsage {
  double user = 0, system = 0;
  uint64_t minor_faults = 0;
  double total() const { return user + system; }
  CpuUsage operator-(const CpuUsage& earlier) const {
    return {user - earlier.user, system - earlier.system, minor_faults - earlier.minor_faults};
  }
};
CpuUsage cpu_usage() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return {double(usage.ru_utime.tv_sec) + 1e-6 * double(usage.ru_utime.tv_usec),
          double(usage.ru_stime.tv_sec) + 1e-6 * double(usage.ru_stime.tv_usec),
          uint64_t(usage.ru_minflt)};
}
double cpu_seconds() {
  return cpu_usage().total();
}
void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

// Writes one rank's trace with about `events` records; returns the count written.
uint64_t write_rank(const std::string& path, int rank, int ranks, uint64_t events) {
  trace::TraceWriter writer;
  std::string metadata = "{\"rank\": " + std::to_string(rank) +
                         ", \"world_size\": " + std::to_string(ranks) + ", \"host\": \"bench\"}";
  if (!writer.open(path, metadata)) {
    std::fprintf(stderr, "%s\n", writer.error().c_str());
    std::exit(1);
  }
  trace::RecordBuffer cpu, gpu;
  uint64_t written = 0;
  uint64_t now = 1'000'000'000;
  uint32_t correlation = 1u << 20;
  int64_t step = 0;
  const char* names[] = {"",
                         "moescope",
                         "train_step",
                         "moe.layer",
                         "moe.route",
                         "moe.experts",
                         "attention",
                         "cudaLaunchKernel",
                         "gemm_kernel",
                         "ncclDevKernel_AllToAll",
                         "a2a",
                         "loss"};
  auto flush = [&](bool force) {
    if (force || cpu.size() > (1u << 20)) {
      writer.write_chunk(1, cpu.bytes());
      cpu.clear();
    }
    if (force || gpu.size() > (1u << 20)) {
      writer.write_chunk(2, gpu.bytes());
      gpu.clear();
    }
  };
  while (written < events) {
    cpu.append<trace::StepRecord>(trace::RecordKind::kStep, now).step = step++;
    cpu.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, now, 2).domain = 1;
    written += 2;
    for (int layer = 0; layer < 2; ++layer) {
      cpu.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, now, 3).domain = 1;
      for (int op = 0; op < 40; ++op) {
        uint32_t name = 4 + op % 3;
        cpu.append<trace::SpanBeginRecord>(trace::RecordKind::kSpanBegin, now + 100, name).domain =
            1;
        auto& call = cpu.append<trace::ApiCallRecord>(trace::RecordKind::kApiCall, now + 200, 7);
        call.end_time = now + 900;
        call.correlation_id = ++correlation;
        auto& kernel =
            gpu.append<trace::GpuKernelRecord>(trace::RecordKind::kGpuKernel, now + 1000, 8);
        kernel.end_time = now + 4000;
        kernel.correlation_id = correlation;
        kernel.stream = 7;
        cpu.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, now + 4100);
        cpu.append<trace::CounterRecord>(trace::RecordKind::kCounter, now + 4100, 11).value = op;
        now += 4200;
        written += 5;
      }
      std::vector<uint64_t> splits(size_t(ranks), 1 << 20);
      auto& comm = gpu.append_sized<trace::CommOpRecord>(trace::RecordKind::kCommOp, now, 10,
                                                         uint32_t(ranks * 8));
      comm.start_time = now;
      comm.end_time = now + 20000;
      comm.bytes = uint64_t(ranks) << 20;
      comm.comm_id = 5;
      comm.kind = 6;
      comm.rank = rank;
      comm.num_ranks = ranks;
      comm.sequence = uint32_t(step * 2 + layer);
      comm.num_splits = uint32_t(ranks);
      std::memcpy(gpu.tail<trace::CommOpRecord>(), splits.data(), splits.size() * 8);
      auto& nccl = gpu.append<trace::GpuKernelRecord>(trace::RecordKind::kGpuKernel, now, 9);
      nccl.end_time = now + 20000;
      nccl.stream = 13;
      auto& alloc = cpu.append<trace::MemoryRecord>(trace::RecordKind::kMemory, now);
      alloc.address = 0x1000 + uint64_t(layer) * 0x100000;
      alloc.bytes = 1 << 20;
      alloc.category = 4;
      auto& load =
          cpu.append_sized<trace::ExpertLoadRecord>(trace::RecordKind::kExpertLoad, now, 0, 64 * 4);
      load.step = step;
      load.layer = uint32_t(layer);
      load.rank = rank;
      load.num_experts = 64;
      auto* tokens = reinterpret_cast<uint32_t*>(cpu.tail<trace::ExpertLoadRecord>());
      for (int e = 0; e < 64; ++e) tokens[e] = uint32_t(100 + (e * 7 + step) % 50);
      now += 20000;
      auto& release = cpu.append<trace::MemoryRecord>(trace::RecordKind::kMemory, now);
      release.address = 0x1000 + uint64_t(layer) * 0x100000;
      release.bytes = 1 << 20;
      release.category = 4;
      release.is_free = 1;
      cpu.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, now);
      written += 7;
    }
    cpu.append<trace::SpanEndRecord>(trace::RecordKind::kSpanEnd, now);
    written += 1;
    flush(false);
  }
  flush(true);
  trace::RecordBuffer strings;
  for (uint32_t id = 1; id < sizeof(names) / sizeof(names[0]); ++id)
    strings.define_string(id, names[id]);
  writer.write_chunk(0, strings.bytes(), trace::ChunkType::kEnd);
  writer.close();
  return written;
}

// Decodes every chunk of every file (threads as the loader uses them); returns raw bytes.
uint64_t decode_only(const std::vector<std::string>& paths, uint64_t& records) {
  std::atomic<uint64_t> bytes{0}, count{0};
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < paths.size(); i = next++) {
      trace::TraceReader reader;
      if (!reader.open(paths[i])) continue;
      trace::Chunk chunk;
      uint64_t local_bytes = 0, local_count = 0;
      while (reader.next_chunk(chunk)) {
        local_bytes += chunk.records.size();
        for (auto record : chunk) local_count += record.kind() != trace::RecordKind::kString;
      }
      bytes += local_bytes;
      count += local_count;
    }
  };
  unsigned threads =
      std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), unsigned(paths.size()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& thread : pool) thread.join();
  records = count;
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t events = 10'000'000;
  int ranks = 4;
  std::string directory =
      std::filesystem::temp_directory_path().string() + "/moescope_analysis_bench";
  bool keep = false;
  bool load_only = false;  // for profiling the loader
  std::vector<std::string> given_files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--events" && i + 1 < argc) {
      events = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--ranks" && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (arg == "--dir" && i + 1 < argc) {
      directory = argv[++i];
    } else if (arg == "--keep") {
      keep = true;
    } else if (arg == "--load-only") {
      load_only = true;
    } else if (arg == "--files") {
      // The rest of the arguments: existing traces to load instead of the synthetic one.
      while (i + 1 < argc) given_files.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: analysis_bench [--events N] [--ranks R] [--dir DIR] [--keep] "
                   "[--load-only [--files TRACE...]]\n");
      return 2;
    }
  }
  std::filesystem::create_directories(directory);
  std::vector<std::string> paths = given_files;
  uint64_t written = 0, file_bytes = 0;
  auto start = Clock::now();
  for (int r = 0; given_files.empty() && r < ranks; ++r) {
    paths.push_back(directory + "/bench." + std::to_string(r) + ".moetrace");
    written += write_rank(paths.back(), r, ranks, events / uint64_t(ranks));
    file_bytes += std::filesystem::file_size(paths.back());
  }
  if (given_files.empty()) {
    std::printf("trace: %d ranks, %.2f M events, %.1f MB on disk (written in %.1f s)\n", ranks,
                double(written) / 1e6, double(file_bytes) / 1e6, seconds_since(start));
  } else {
    std::printf("trace: %zu given file(s)\n", given_files.size());
  }

  if (load_only) {
    for (int trial = 0; trial < 3; ++trial) {
      start = Clock::now();
      CpuUsage cpu_start = cpu_usage();
      analysis::TraceModel model = analysis::load_traces(paths);
      double wall = seconds_since(start);
      CpuUsage cpu = cpu_usage() - cpu_start;
      for (const auto& error : model.errors)
        std::fprintf(stderr, "%s\n", error.to_string().c_str());
      if (model.processes.empty()) return 1;
      std::printf(
          "load %.2f s wall, %.2f s CPU (user %.2f, system %.2f, %.0f k minor faults): %.1f M "
          "events/s, %.1f M events per CPU-s\n",
          wall, cpu.total(), cpu.user, cpu.system, double(cpu.minor_faults) / 1e3,
          double(model.total_events) / wall / 1e6, double(model.total_events) / cpu.total() / 1e6);
    }
    if (!keep) std::filesystem::remove_all(directory);
    return 0;
  }
  uint64_t records = 0;
  start = Clock::now();
  double decode_cpu_start = cpu_seconds();
  uint64_t raw_bytes = decode_only(paths, records);
  double decode_s = seconds_since(start);
  double decode_cpu_s = cpu_seconds() - decode_cpu_start;

  reset_peak_rss();
  uint64_t rss_before = status_field("VmRSS:");
  start = Clock::now();
  double load_cpu_start = cpu_seconds();
  analysis::TraceModel model = analysis::load_traces(paths);
  double load_s = seconds_since(start);
  double load_cpu_s = cpu_seconds() - load_cpu_start;
  uint64_t peak = status_field("VmHWM:");
  uint64_t rss_after = status_field("VmRSS:");
  if (!model.errors.empty())
    std::fprintf(stderr, "load errors: %s\n", model.errors[0].to_string().c_str());

  start = Clock::now();
  analysis::Report report = analysis::build_report(model);
  double report_s = seconds_since(start);

  std::string json_path = directory + "/bench.json";
  reset_peak_rss();  // the export streams: its peak RSS growth must not scale with the output
  const uint64_t rss_before_export = status_field("VmRSS:");
  start = Clock::now();
  analysis::ChromeExportResult exported = analysis::export_chrome_trace(model, json_path);
  double export_s = seconds_since(start);
  const uint64_t export_peak = status_field("VmHWM:");
  const double export_growth_mb =
      double(export_peak - std::min(export_peak, rss_before_export)) / 1e6;
  // The formatter alone, writing to /dev/null.
  double null_s = 0;
  {
    std::FILE* null_file = std::fopen("/dev/null", "wb");
    start = Clock::now();
    analysis::export_chrome_trace(model, null_file);
    null_s = seconds_since(start);
    std::fclose(null_file);
  }
  // Baseline: fwrite of the same number of bytes from memory to the same disk.
  std::vector<char> block(1 << 20, 'x');
  start = Clock::now();
  {
    std::FILE* file = std::fopen((directory + "/baseline.bin").c_str(), "wb");
    for (uint64_t done = 0; done < exported.bytes; done += block.size()) {
      std::fwrite(block.data(), 1, std::min<uint64_t>(block.size(), exported.bytes - done), file);
    }
    std::fclose(file);
  }
  double fwrite_s = seconds_since(start);

  const double load_rate = double(model.total_events) / load_s;
  const double decode_rate = double(records) / decode_s;
  const double memory_ratio = double(peak - std::min(peak, rss_before)) / double(raw_bytes);
  const double export_rate = double(exported.bytes) / export_s / 1e6;
  std::printf("| measure | value | baseline (same run) | ratio | target |\n");
  std::printf("| --- | --- | --- | --- | --- |\n");
  std::printf(
      "| load | %.1f M events/s (%.2f s wall, %.2f s CPU: %.1f M events per CPU-s) | decode "
      "only %.1f M records/s (%.1f M per CPU-s) | %.2f | >= 20 M events/s |\n",
      load_rate / 1e6, load_s, load_cpu_s, double(model.total_events) / load_cpu_s / 1e6,
      decode_rate / 1e6, double(records) / decode_cpu_s / 1e6, load_rate / decode_rate);
  std::printf(
      "| memory while loading | peak +%.0f MB, model %.0f MB | %.0f MB uncompressed events | %.2fx "
      "| <= 3x |\n",
      double(peak - std::min(peak, rss_before)) / 1e6,
      double(rss_after - std::min(rss_after, rss_before)) / 1e6, double(raw_bytes) / 1e6,
      memory_ratio);
  std::printf("| report | %.2f s, %zu findings | load %.2f s | %.2f | < 5 s at 10 M events |\n",
              report_s, report.findings.size(), load_s, report_s / load_s);
  std::printf(
      "| export | %.0f MB/s to disk (%.0f MB, %.2f s, peak RSS +%.1f MB); %.0f MB/s to /dev/null "
      "| fwrite %.0f MB/s | %.2f | >= 150 MB/s |\n",
      export_rate, double(exported.bytes) / 1e6, export_s, export_growth_mb,
      double(exported.bytes) / null_s / 1e6, double(exported.bytes) / fwrite_s / 1e6,
      export_rate / (double(exported.bytes) / fwrite_s / 1e6));
  if (!keep) std::filesystem::remove_all(directory);
  return exported.ok ? 0 : 1;
}
