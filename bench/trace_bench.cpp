// Foundation benchmarks: recorder hot path, writer and reader throughput, compressed size.
// Prints one table; every figure is the median of several repetitions, and each is shown next
// to a baseline measured in the same run (these machines are shared and noisy).
//
//   build/bin/trace_bench [--quick | --comm-ops]
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "moescope/recorder.h"
#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace {

using namespace moescope::trace;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::string temp_file(const char* name) {
  return std::string("/tmp/moescope_bench_") + std::to_string(getpid()) + "_" + name;
}

uint64_t file_size(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
}

// ns per span (begin + end) on `threads` threads at once, recording into a real file: the
// median over batches of 100k spans. Between batches each thread pauses (untimed) so the flush
// thread drains, as in a program that records in bursts; the first batches warm the buffers.
double span_cost_ns(int threads, int batches, bool recording) {
  constexpr int kBatch = 100'000;
  std::string path = temp_file("spans.moetrace");
  if (recording && moescope_recorder_start(path.c_str(), nullptr) != 0) return -1;
  moescope_name_t name = moescope_intern("bench span");
  std::vector<std::vector<double>> per_thread(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int batch = 0; batch < batches + 3; ++batch) {
        auto start = Clock::now();
        for (int i = 0; i < kBatch; ++i) {
          moescope_span_begin(0, name);
          moescope_span_end();
        }
        double ns = seconds_since(start) * 1e9 / kBatch;
        if (batch >= 3) per_thread[t].push_back(ns);  // the first batches warm the buffers
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
    });
  }
  for (auto& worker : workers) worker.join();
  if (recording) moescope_recorder_stop();
  std::remove(path.c_str());
  double worst = 0;
  for (auto& values : per_thread) worst = std::max(worst, median(values));
  return worst;
}

// ns per collective recorded, the median over batches of 20k: moescope_comm_op alone (an op
// reported once done), or after moescope_comm_op_enter (the c10d capture and the NCCL completion
// tracker report the op they wait for first: the recorder keeps which collective each
// communicator is in, for the collective_open records of a hang).
double comm_op_cost_ns(bool enter, int batches) {
  constexpr int kBatch = 20'000;
  std::string path = temp_file("comm.moetrace");
  if (moescope_recorder_start(path.c_str(), nullptr) != 0) return -1;
  moescope_comm_op_info info{};
  info.kind = MOESCOPE_COMM_ALL_REDUCE;
  info.bytes = 4096;
  info.count = 1024;
  info.comm_id = 0xabc;
  info.rank = 3;
  info.num_ranks = 8;
  info.peer = info.root = info.device = -1;
  info.name = moescope_intern("all_reduce");
  std::vector<double> per_batch;
  for (int batch = 0; batch < batches + 3; ++batch) {
    auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
      ++info.sequence;
      info.enqueue_ns = info.start_ns = moescope_now_ns();
      if (enter) moescope_comm_op_enter(&info);
      info.end_ns = info.start_ns + 1000;
      moescope_comm_op(&info);
    }
    double ns = seconds_since(start) * 1e9 / kBatch;
    if (batch >= 3) per_batch.push_back(ns);  // the first batches warm the buffers
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  moescope_recorder_stop();
  std::remove(path.c_str());
  return median(per_batch);
}

// The hardware floor of a span: the two CPU-clock reads it needs (the recorder stamps begin
// and end with rdtsc), back to back, timed in batches like span_cost_ns: median ns per pair.
double tick_pair_floor_ns(int batches) {
  constexpr int kBatch = 100'000;
  std::vector<double> per_batch;
  uint64_t sink = 0;
  for (int batch = 0; batch < batches; ++batch) {
    auto start = Clock::now();
    for (int i = 0; i < kBatch; ++i) {
#if defined(__x86_64__)
      uint64_t begin = __rdtsc();
      uint64_t end = __rdtsc();
#else
      uint64_t begin = moescope_now_ns();
      uint64_t end = moescope_now_ns();
#endif
      sink += end - begin;
    }
    per_batch.push_back(seconds_since(start) * 1e9 / kBatch);
  }
  return sink == 1 ? 0 : median(per_batch);
}

double clock_pair_ns(int iterations) {
  auto start = Clock::now();
  uint64_t sink = 0;
  for (int i = 0; i < iterations; ++i) sink += moescope_now_ns() + moescope_now_ns();
  double ns = seconds_since(start) * 1e9 / iterations;
  return sink == 1 ? 0 : ns;
}

// A realistic GPU-side mix: kernels of a training step (a few dozen distinct names, repeating
// launch configurations, jittered durations, increasing correlation ids) with their launches.
RecordBuffer kernel_mix(int kernels, std::mt19937_64& rng) {
  RecordBuffer buffer;
  uint64_t time = 1'700'000'000'000'000'000ull;
  uint32_t correlation = 1000;
  const uint32_t grids[4] = {132, 264, 1024, 8};
  for (int i = 0; i < kernels; ++i) {
    int op = i % 24;
    uint64_t duration = 4000 + op * 900 + rng() % 300;
    auto& kernel = buffer.append<GpuKernelRecord>(RecordKind::kGpuKernel, time, 10 + op);
    kernel.end_time = time + duration;
    kernel.correlation_id = correlation;
    kernel.device = 0;
    kernel.context = 1;
    kernel.stream = 7;
    kernel.grid[0] = grids[op % 4], kernel.grid[1] = 1, kernel.grid[2] = 1;
    kernel.block[0] = 256, kernel.block[1] = 1, kernel.block[2] = 1;
    kernel.shared_memory_bytes = op % 3 ? 0 : 49152;
    kernel.registers_per_thread = 64 + 8 * (op % 5);
    time += duration + 1500 + rng() % 200;
    correlation += 2 + (op == 0);
  }
  return buffer;
}

RecordBuffer api_mix(int launches, std::mt19937_64& rng) {
  RecordBuffer buffer;
  uint64_t time = 1'700'000'000'000'000'000ull;
  uint32_t correlation = 1000;
  for (int i = 0; i < launches; ++i) {
    auto& call = buffer.append<ApiCallRecord>(RecordKind::kApiCall, time, 3);
    call.end_time = time + 2500 + rng() % 400;
    call.correlation_id = correlation;
    time += 5000 + rng() % 2000;
    correlation += 2 + (i % 24 == 0);
  }
  return buffer;
}

RecordBuffer span_mix(int pairs, std::mt19937_64& rng) {
  RecordBuffer buffer;
  uint64_t time = 1'700'000'000'000'000'000ull;
  for (int i = 0; i < pairs; ++i) {
    buffer.append<SpanBeginRecord>(RecordKind::kSpanBegin, time, 20 + i % 12).domain = 1;
    time += 200 + rng() % 100;
    buffer.append<SpanEndRecord>(RecordKind::kSpanEnd, time);
    time += 50 + rng() % 20;
  }
  return buffer;
}

size_t count_records(const RecordBuffer& buffer) {
  size_t count = 0;
  for (size_t at = 0; at < buffer.size(); ++count) {
    at += reinterpret_cast<const RecordHeader*>(buffer.bytes().data() + at)->size;
  }
  return count;
}

struct WriteResult {
  double events_per_second;
  double bytes_per_event;
  uint64_t events;
  std::string path;
};

// The version-1 coding, kept as the baseline: rows with delta-coded times, zstd level -1.
WriterOptions row_options() {
  WriterOptions options;
  options.columns = false;
  options.zstd_level = -1;
  return options;
}

// Record boundaries that cut `source` into chunks of about 1 MB (as the recorder's flush does).
std::vector<size_t> chunk_bounds(const RecordBuffer& source) {
  std::vector<size_t> bounds{0};
  size_t end = 0;
  while (end < source.size()) {
    size_t at = end;
    while (end < source.size() && end - at < (1u << 20)) {
      end += reinterpret_cast<const RecordHeader*>(source.bytes().data() + end)->size;
    }
    bounds.push_back(end);
  }
  return bounds;
}

// Writes `source` again and again in 1 MB chunks to a real file. Timed: copying each chunk out
// of the source (the recorder's drain does the same copy) and TraceWriter::write_chunk. The
// chunk boundaries are found beforehand: walking the 100+ MB source for them is a cache-miss
// chain the recorder does not have (it splits the records it has just drained).
WriteResult write_file(const RecordBuffer& source, int repeats, WriterOptions options = {}) {
  WriteResult result;
  result.path = temp_file(options.columns ? "write.moetrace" : "write_rows.moetrace");
  size_t events_per_copy = count_records(source);
  std::vector<size_t> bounds = chunk_bounds(source);
  TraceWriter writer;
  writer.open(result.path, R"({"bench":true})", options);
  std::vector<uint8_t> chunk;
  auto start = Clock::now();
  for (int r = 0; r < repeats; ++r) {
    for (size_t c = 0; c + 1 < bounds.size(); ++c) {
      chunk.assign(source.bytes().begin() + bounds[c], source.bytes().begin() + bounds[c + 1]);
      writer.write_chunk(1, chunk);
    }
  }
  writer.close();
  double elapsed = seconds_since(start);
  result.events = events_per_copy * repeats;
  result.events_per_second = result.events / elapsed;
  result.bytes_per_event = double(file_size(result.path)) / result.events;
  return result;
}

double read_events_per_second(const std::string& path, uint64_t expected_events) {
  auto start = Clock::now();
  TraceReader reader;
  if (!reader.open(path)) return -1;
  Chunk chunk;
  uint64_t events = 0, checksum = 0;
  while (reader.next_chunk(chunk)) {
    for (RecordView record : chunk) {
      ++events;
      checksum += record.header().time;
    }
  }
  double elapsed = seconds_since(start);
  if (events != expected_events) {
    std::fprintf(stderr, "reader saw %llu events, expected %llu\n", (unsigned long long)events,
                 (unsigned long long)expected_events);
    return -1;
  }
  return checksum == 1 ? 0 : events / elapsed;
}

void row(const char* what, double value, const char* unit, const char* target,
         const std::string& baseline) {
  std::printf("| %-44s | %10.2f %-8s | %-12s | %s |\n", what, value, unit, target,
              baseline.c_str());
}

}  // namespace

// The collective rows: done alone, and entered first (both in the same repetitions).
void comm_op_rows(int repetitions, int batches) {
  std::vector<double> done, entered;
  for (int r = 0; r < repetitions; ++r) {
    done.push_back(comm_op_cost_ns(false, batches));
    entered.push_back(comm_op_cost_ns(true, batches));
  }
  row("collective reported done (moescope_comm_op)", median(done), "ns", "-",
      "entered first, then done: " + std::to_string(median(entered)).substr(0, 5) + " ns");
}

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // --comm-ops: only the collective rows (an A/B of two builds of the recorder runs this).
  bool comm_ops_only = argc > 1 && std::strcmp(argv[1], "--comm-ops") == 0;
  int repetitions = quick ? 3 : 7;
  int spans = quick ? 1'000'000 : 5'000'000;
  int batches = quick ? 8 : 20;
  std::mt19937_64 rng(42);

  std::vector<double> one, two, off, clocks, floors;
  for (int r = 0; r < repetitions && !comm_ops_only; ++r) {
    floors.push_back(tick_pair_floor_ns(batches));
    one.push_back(span_cost_ns(1, batches, true));
    two.push_back(span_cost_ns(2, batches, true));
    off.push_back(span_cost_ns(1, batches, false));
    clocks.push_back(clock_pair_ns(spans));
  }
  char baseline[200];
  std::printf("| measure | value | target | baseline in the same run |\n|---|---|---|---|\n");
  if (comm_ops_only) {
    comm_op_rows(repetitions, batches);
    return 0;
  }
  std::snprintf(baseline, sizeof(baseline),
                "two rdtsc (the floor): %.2f ns; not recording: %.2f ns; two clock_gettime: "
                "%.2f ns",
                median(floors), median(off), median(clocks));
  row("span begin+end, 1 thread (median)", median(one), "ns", "<= 15 ns", baseline);
  row("span begin+end above the two-rdtsc floor", median(one) - median(floors), "ns", "-",
      "floor: " + std::to_string(median(floors)).substr(0, 5) + " ns");
  row("span begin+end, 2 threads, per thread", median(two), "ns", "<= 25 ns",
      "1 thread: " + std::to_string(median(one)).substr(0, 5) + " ns");
  comm_op_rows(repetitions, batches);

  int kernels = quick ? 200'000 : 1'000'000;
  RecordBuffer kernels_buffer = kernel_mix(kernels, rng);
  RecordBuffer api_buffer = api_mix(kernels, rng);
  RecordBuffer spans_buffer = span_mix(kernels, rng);
  RecordBuffer mixed;  // interleaved in the proportions of a traced training step
  mixed.bytes() = spans_buffer.bytes();
  mixed.bytes().insert(mixed.bytes().end(), api_buffer.bytes().begin(), api_buffer.bytes().end());
  mixed.bytes().insert(mixed.bytes().end(), kernels_buffer.bytes().begin(),
                       kernels_buffer.bytes().end());

  WriteResult kernel_write = write_file(kernels_buffer, 1);
  std::remove(kernel_write.path.c_str());
  WriteResult kernel_rows = write_file(kernels_buffer, 1, row_options());
  std::remove(kernel_rows.path.c_str());
  WriteResult api_write = write_file(api_buffer, 1);
  std::remove(api_write.path.c_str());
  std::snprintf(baseline, sizeof(baseline), "raw record: %zu B; v1 rows + zstd -1: %.2f B",
                sizeof(GpuKernelRecord), kernel_rows.bytes_per_event);
  row("compressed size, kernel event", kernel_write.bytes_per_event, "B/event", "<= 8 B", baseline);
  row("compressed size, launch (API call) event", api_write.bytes_per_event, "B/event", "-",
      "raw record: " + std::to_string(sizeof(ApiCallRecord)) + " B");

  std::vector<double> write_rates, read_rates, row_write_rates, row_read_rates, raw_copy_rates;
  double mixed_bytes_per_event = 0, row_bytes_per_event = 0;
  for (int r = 0; r < repetitions; ++r) {
    // Column coding (the default) and the version-1 row coding, interleaved so that both see
    // the same machine load.
    WriteResult write = write_file(mixed, quick ? 2 : 5);
    write_rates.push_back(write.events_per_second);
    mixed_bytes_per_event = write.bytes_per_event;
    read_rates.push_back(read_events_per_second(write.path, write.events));
    std::remove(write.path.c_str());
    WriteResult rows = write_file(mixed, quick ? 2 : 5, row_options());
    row_write_rates.push_back(rows.events_per_second);
    row_bytes_per_event = rows.bytes_per_event;
    row_read_rates.push_back(read_events_per_second(rows.path, rows.events));
    std::remove(rows.path.c_str());
    auto start = Clock::now();  // baseline: a plain memcpy of the same raw bytes
    std::vector<uint8_t> copy(mixed.size());
    for (int i = 0; i < (quick ? 2 : 5); ++i)
      std::memcpy(copy.data(), mixed.bytes().data(), copy.size());
    raw_copy_rates.push_back(write.events / seconds_since(start));
  }
  std::snprintf(baseline, sizeof(baseline),
                "v1 rows + zstd -1: %.1f M ev/s; memcpy of the records: %.0f M ev/s",
                median(row_write_rates) / 1e6, median(raw_copy_rates) / 1e6);
  row("writer to disk, mixed events", median(write_rates) / 1e6, "M ev/s", ">= 30 M/s", baseline);
  std::snprintf(baseline, sizeof(baseline), "v1 rows + zstd -1: %.1f M ev/s",
                median(row_read_rates) / 1e6);
  row("reader from disk, mixed events", median(read_rates) / 1e6, "M ev/s", ">= 30 M/s", baseline);
  std::snprintf(baseline, sizeof(baseline), "v1 rows + zstd -1: %.2f B; raw mean: %.2f B",
                row_bytes_per_event, double(mixed.size()) / count_records(mixed));
  row("compressed size, mixed events", mixed_bytes_per_event, "B/event", "-", baseline);
  return 0;
}
