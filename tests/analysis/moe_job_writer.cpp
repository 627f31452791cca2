// The synthetic MoE job (moe_job_writer.h): simulate every rank on one clock, then write each
// rank's trace from the simulation.
#include "moe_job_writer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "moescope/trace/trace_reader.h"
#include "moescope/trace/trace_writer.h"

namespace moescope::testing {
namespace {

using namespace moescope::trace;

constexpr int64_t kUs = 1000;
constexpr int64_t kKernelNs = 50 * kUs;        // one GEMM at the base speed
constexpr int64_t kStepOverheadNs = 10 * kUs;  // step start to the first kernel
constexpr int64_t kAllToAllNs = 120 * kUs;     // transfer once every member entered
constexpr int64_t kAllReduceNs = 300 * kUs;
constexpr uint64_t kBytesPerToken = 4096;
constexpr uint32_t kBaseTokens = 512;

// Name ids of every trace (defined in its last chunk).
enum Name : uint32_t {
  kTrainStep = 1,
  kAttention,
  kExpertGemm,
  kLaunch,
  kAllToAllName,
  kAllReduceName,
  kDomain,
  kNameCount
};
const char* const kNames[] = {"",
                              "train_step",
                              "attention_fwd",
                              "moe_expert_gemm",
                              "cudaLaunchKernel",
                              "all_to_all",
                              "all_reduce",
                              "job"};

// Deterministic jitter in [-1, 1] from a few integers (splitmix64).
double jitter(uint64_t a, uint64_t b, uint64_t c, uint64_t d = 0) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 17) * 0x94D049BB133111EBull ^ (d + 91) * 0xD6E8FEB86659FD93ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return double(x >> 11) / double(1ull << 52) - 1.0;
}

// Every rank's times, on one clock (see the header): [rank][step][layer] flattened.
struct Simulation {
  int ranks = 0, steps = 0, layers = 0, groups = 0;
  std::vector<int64_t> step_start;        // [steps]
  std::vector<int64_t> compute_ns;        // [ranks][steps][layers]
  std::vector<int64_t> entry;             // [ranks][steps][layers]: enters the all-to-all
  std::vector<int64_t> all_to_all_start;  // [groups][steps][layers]: last member entered
  std::vector<int64_t> reduce_entry;      // [ranks][steps]
  std::vector<int64_t> reduce_start;      // [steps]
  size_t at(int r, int s, int l) const { return (size_t(r) * steps + s) * layers + l; }
  size_t group_at(int g, int s, int l) const { return (size_t(g) * steps + s) * layers + l; }
};

double compute_factor(const MoeJobConfig& c, int rank, int step) {
  double factor = 1.0;
  if (rank == c.slow_rank && step >= c.slow_from_step) factor *= c.slow_factor;
  if (c.slow_host >= 0 && rank / c.ranks_per_host == c.slow_host) factor *= c.host_factor;
  return factor;
}

Simulation simulate(const MoeJobConfig& c) {
  Simulation sim;
  sim.ranks = c.ranks, sim.steps = c.steps, sim.layers = c.layers;
  sim.groups = (c.ranks + c.expert_parallel - 1) / c.expert_parallel;
  const size_t cells = size_t(c.ranks) * c.steps * c.layers;
  sim.compute_ns.resize(cells);
  sim.entry.resize(cells);
  sim.all_to_all_start.resize(size_t(sim.groups) * c.steps * c.layers);
  sim.reduce_entry.resize(size_t(c.ranks) * c.steps);
  sim.step_start.resize(size_t(c.steps));
  sim.reduce_start.resize(size_t(c.steps));
  std::vector<int64_t> now(size_t(c.ranks));
  int64_t step_start = 1'000'000'000;
  for (int s = 0; s < c.steps; ++s) {
    sim.step_start[size_t(s)] = step_start;
    for (int r = 0; r < c.ranks; ++r) now[size_t(r)] = step_start + kStepOverheadNs;
    for (int l = 0; l < c.layers; ++l) {
      for (int r = 0; r < c.ranks; ++r) {
        const double factor = compute_factor(c, r, s) * (1.0 + 0.02 * jitter(r, s, l));
        const int64_t compute = int64_t(double(kKernelNs * c.kernels_per_layer) * factor);
        sim.compute_ns[sim.at(r, s, l)] = compute;
        sim.entry[sim.at(r, s, l)] = now[size_t(r)] + compute;
      }
      for (int g = 0; g < sim.groups; ++g) {
        int64_t last = 0;
        for (int r = g * c.expert_parallel; r < std::min(c.ranks, (g + 1) * c.expert_parallel);
             ++r) {
          last = std::max(last, sim.entry[sim.at(r, s, l)]);
        }
        sim.all_to_all_start[sim.group_at(g, s, l)] = last;
        for (int r = g * c.expert_parallel; r < std::min(c.ranks, (g + 1) * c.expert_parallel);
             ++r) {
          now[size_t(r)] = last + kAllToAllNs;
        }
      }
    }
    int64_t last = 0;
    for (int r = 0; r < c.ranks; ++r) {
      sim.reduce_entry[size_t(r) * c.steps + s] = now[size_t(r)] + 3 * kUs;
      last = std::max(last, now[size_t(r)] + 3 * kUs);
    }
    sim.reduce_start[size_t(s)] = last;
    step_start = last + kAllReduceNs + 5 * kUs;
  }
  return sim;
}

std::string metadata(const MoeJobConfig& c, int rank) {
  char text[512];
  std::snprintf(text, sizeof(text),
                "{\"rank\": %d, \"world_size\": %d, \"local_rank\": %d, \"host\": \"%s\", "
                "\"run_id\": \"%s\", \"command_line\": \"moe_job_traces\", \"start_ns\": "
                "1000000000, \"start_unix_ns\": %lld}",
                rank, c.ranks, rank % c.ranks_per_host,
                moe_job_host_name(rank / c.ranks_per_host).c_str(), c.run_id.c_str(),
                static_cast<long long>(c.start_unix_ns));
  return text;
}

// Tokens this rank's router sends to each expert of `layer` in `step`.
std::vector<uint32_t> expert_tokens(const MoeJobConfig& c, int rank, int step, int layer) {
  std::vector<uint32_t> tokens(size_t(c.experts));
  for (int e = 0; e < c.experts; ++e) {
    double count = kBaseTokens * (1.0 + 0.1 * jitter(rank, step, layer, uint64_t(e) + 1000));
    if (layer == c.hot_layer && e == c.hot_expert) count *= c.hot_factor;
    tokens[size_t(e)] = uint32_t(count);
  }
  return tokens;
}

uint64_t write_rank(const MoeJobConfig& c, const Simulation& sim, int rank,
                    const std::string& path) {
  TraceWriter writer;
  if (!writer.open(path, metadata(c, rank))) {
    std::fprintf(stderr, "moe_job_writer: %s\n", writer.error().c_str());
    return 0;
  }
  RecordBuffer cpu, gpu;
  uint64_t written = 0;
  if (c.strings_first) {
    RecordBuffer strings;
    for (uint32_t id = 1; id < kNameCount; ++id) strings.define_string(id, kNames[id]);
    writer.write_chunk(1, strings.bytes());
  }
  uint32_t correlation = 1;
  const int group = rank / c.expert_parallel;
  const int group_size =
      std::min(c.ranks, (group + 1) * c.expert_parallel) - group * c.expert_parallel;
  const int experts_per_peer = std::max(1, c.experts / std::max(1, group_size));
  for (int s = 0; s < c.steps; ++s) {
    const int64_t start = sim.step_start[size_t(s)];
    if (c.step_markers) cpu.append<StepRecord>(RecordKind::kStep, uint64_t(start)).step = s;
    cpu.append<SpanBeginRecord>(RecordKind::kSpanBegin, uint64_t(start), kTrainStep).domain =
        kDomain;
    written += 2;
    int64_t now = start + kStepOverheadNs;
    for (int l = 0; l < c.layers; ++l) {
      const int64_t kernel_ns = sim.compute_ns[sim.at(rank, s, l)] / c.kernels_per_layer;
      for (int k = 0; k < c.kernels_per_layer; ++k) {
        const int64_t kernel_start = now + k * kernel_ns;
        auto& call = cpu.append<ApiCallRecord>(RecordKind::kApiCall,
                                               uint64_t(kernel_start - 4 * kUs), kLaunch);
        call.end_time = uint64_t(kernel_start - 3 * kUs);
        call.correlation_id = ++correlation;
        auto& kernel = gpu.append<GpuKernelRecord>(RecordKind::kGpuKernel, uint64_t(kernel_start),
                                                   k < 2 ? kAttention : kExpertGemm);
        kernel.end_time = uint64_t(kernel_start + kernel_ns);
        kernel.correlation_id = correlation;
        kernel.stream = 7;
        written += 2;
      }
      const int64_t entry = sim.entry[sim.at(rank, s, l)];
      const int64_t done = sim.all_to_all_start[sim.group_at(group, s, l)] + kAllToAllNs;
      const std::vector<uint32_t> tokens = expert_tokens(c, rank, s, l);
      std::vector<uint64_t> splits(size_t(group_size), 0);
      for (int e = 0; e < c.experts; ++e) {
        splits[size_t(std::min(group_size - 1, e / experts_per_peer))] +=
            tokens[size_t(e)] * kBytesPerToken;
      }
      uint64_t sent = 0;
      for (uint64_t bytes : splits) sent += bytes;
      auto& comm = gpu.append_sized<CommOpRecord>(RecordKind::kCommOp, uint64_t(entry - 2 * kUs),
                                                  kAllToAllName, uint32_t(group_size * 8));
      comm.start_time = uint64_t(entry);
      comm.end_time = uint64_t(done);
      comm.bytes = sent;
      comm.count = sent / 2;
      comm.comm_id = 1000 + uint64_t(group);
      comm.kind = 6;
      comm.rank = rank - group * c.expert_parallel;
      comm.peer = -1;
      comm.root = -1;
      comm.device = 0;
      comm.num_ranks = group_size;
      comm.sequence = uint32_t(s * c.layers + l);
      comm.num_splits = uint32_t(group_size);
      std::memcpy(gpu.tail<CommOpRecord>(), splits.data(), splits.size() * 8);
      // Each append may move the buffer: a record is filled before the next is appended.
      const uint64_t address = 0x10000000 + uint64_t(l) * 0x1000000;
      auto& alloc = cpu.append<MemoryRecord>(RecordKind::kMemory, uint64_t(entry));
      alloc.address = address;
      alloc.bytes = sent;
      alloc.category = 4;
      auto& load = cpu.append_sized<ExpertLoadRecord>(RecordKind::kExpertLoad, uint64_t(entry), 0,
                                                      uint32_t(c.experts * 4));
      load.step = s;
      load.layer = uint32_t(l);
      load.rank = rank;
      load.num_experts = uint32_t(c.experts);
      std::memcpy(cpu.tail<ExpertLoadRecord>(), tokens.data(), tokens.size() * 4);
      auto& release = cpu.append<MemoryRecord>(RecordKind::kMemory, uint64_t(done));
      release.address = address;
      release.bytes = sent;
      release.category = 4;
      release.is_free = 1;
      written += 4;
      now = done;
    }
    const int64_t entry = sim.reduce_entry[size_t(rank) * c.steps + s];
    const int64_t done = sim.reduce_start[size_t(s)] + kAllReduceNs;
    if (c.hang_missing_rank >= 0 && s == c.steps - 1) {
      if (rank != c.hang_missing_rank) {
        auto& open = gpu.append<CollectiveOpenRecord>(RecordKind::kCollectiveOpen,
                                                      uint64_t(entry - 2 * kUs), kAllReduceName);
        open.comm_id = 1;
        open.bytes = 64ull << 20;
        open.kind = 1;
        open.sequence = uint32_t(s);
        open.rank = rank;
        open.num_ranks = c.ranks;
        ++written;
      }
      break;
    }
    auto& reduce =
        gpu.append<CommOpRecord>(RecordKind::kCommOp, uint64_t(entry - 2 * kUs), kAllReduceName);
    reduce.start_time = uint64_t(entry);
    reduce.end_time = uint64_t(done);
    reduce.bytes = 64ull << 20;
    reduce.count = reduce.bytes / 2;
    reduce.comm_id = 1;
    reduce.kind = 1;
    reduce.rank = rank;
    reduce.peer = -1;
    reduce.root = -1;
    reduce.device = 0;
    reduce.num_ranks = c.ranks;
    reduce.sequence = uint32_t(s);
    cpu.append<SpanEndRecord>(RecordKind::kSpanEnd, uint64_t(done));
    written += 2;
    if (cpu.size() > c.chunk_bytes) writer.write_chunk(1, cpu.bytes()), cpu.clear();
    if (gpu.size() > c.chunk_bytes) writer.write_chunk(2, gpu.bytes()), gpu.clear();
  }
  writer.write_chunk(1, cpu.bytes());
  writer.write_chunk(2, gpu.bytes());
  RecordBuffer strings;
  for (uint32_t id = 1; id < kNameCount; ++id) strings.define_string(id, kNames[id]);
  if (c.hang_missing_rank >= 0 && c.hang_stopped_after_ns > 0) {
    const int64_t hang_entry = sim.reduce_entry[size_t(rank) * c.steps + c.steps - 1];
    strings.append<StatsRecord>(RecordKind::kStats, uint64_t(hang_entry + c.hang_stopped_after_ns));
  }
  writer.write_chunk(0, strings.bytes(),
                     c.hang_missing_rank >= 0 ? ChunkType::kEvents : ChunkType::kEnd);
  writer.close();
  return written;
}

}  // namespace

std::string moe_job_host_name(int host) {
  char name[32];
  std::snprintf(name, sizeof(name), "node-%03d", host);
  return name;
}

std::vector<std::string> write_moe_job(const MoeJobConfig& config, const std::string& directory,
                                       uint64_t* events) {
  if (config.ranks < 1 || config.steps < 1 || config.layers < 1 || config.experts < 1 ||
      config.ranks_per_host < 1 || config.expert_parallel < 1 || config.kernels_per_layer < 1) {
    std::fprintf(stderr, "moe_job_writer: every count must be at least 1\n");
    return {};
  }
  std::filesystem::create_directories(directory);
  const Simulation sim = simulate(config);
  std::vector<std::string> paths;
  for (int r = 0; r < config.ranks; ++r) {
    paths.push_back(directory + "/job." + std::to_string(r) + ".moetrace");
  }
  std::atomic<int> next{0};
  std::atomic<uint64_t> total{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (int r = next++; r < config.ranks; r = next++) {
      const uint64_t written = write_rank(config, sim, r, paths[size_t(r)]);
      if (!written) failed = true;
      total += written;
    }
  };
  const unsigned threads =
      std::max(1u, std::min(config.threads ? config.threads : std::thread::hardware_concurrency(),
                            unsigned(config.ranks)));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& thread : pool) thread.join();
  if (failed) return {};
  if (events) *events = total;
  return paths;
}

std::vector<uint64_t> trace_chunk_ends(const std::string& path) {
  TraceReader reader;
  std::vector<uint64_t> ends;
  if (!reader.open(path)) return ends;
  Chunk chunk;
  while (reader.next_chunk(chunk)) ends.push_back(reader.position());
  return ends;
}

}  // namespace moescope::testing
