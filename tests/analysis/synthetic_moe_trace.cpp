#include "synthetic_moe_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <system_error>

#include "moescope/trace/trace_writer.h"

namespace moescope::testing {
namespace {

using trace::RecordBuffer;
using trace::RecordKind;

enum Name : uint32_t {
  kDomain = 1,
  kLayerSpan,
  kRouteSpan,
  kDispatchSpan,
  kExpertsSpan,
  kCombineSpan,
  kLaunch,
  kRouterKernel,
  kExpertKernel,
  kNcclKernel,
  kSharedKernel,
  kDispatchOp,
  kCombineOp,
  kThreadName,
  kOptimizerKernel,
  kStepRange,
  kNastyName,
  kCopyName,
  kNumNames
};

const char* const kNames[] = {"",
                              "moescope",
                              "moe.layer",
                              "moe.route",
                              "moe.dispatch_a2a",
                              "moe.experts",
                              "moe.combine_a2a",
                              "cudaLaunchKernel",
                              "router_topk_kernel",
                              "grouped_gemm_expert_kernel",
                              "ncclDevKernel_AllToAll_RING_LL",
                              "shared_mlp_kernel",
                              "a2a.dispatch",
                              "a2a.combine",
                              "main",
                              "optimizer_step_kernel",
                              "train_step",
                              "",
                              "Memcpy DtoH"};

constexpr uint32_t kComputeStream = 7;
constexpr uint32_t kCommStream = 13;
constexpr uint64_t kCommId = 0xC0FFEEull;
constexpr uint64_t kBytesPerToken = 4096;

int64_t ms(double value) {
  return static_cast<int64_t>(std::llround(value * double(kMs)));
}

struct RankWriter {
  RecordBuffer cpu;  // stream 1: the training thread
  RecordBuffer gpu;  // stream 2: GPU activity (as the CUPTI thread writes it)
  int64_t skew = 0;
  // CUPTI ids grow large in real runs; small ones also trip HTA 0.5 under pandas 3 (it
  // downcasts the correlation column to int8 and then stores event indices in it).
  uint32_t next_correlation = 1u << 20;
  uint64_t next_address = 0x7f0000000000ull;

  uint64_t t(int64_t time) const { return static_cast<uint64_t>(time + skew); }

  void span_begin(int64_t time, uint32_t name) {
    cpu.append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, t(time), name).domain = kDomain;
  }
  void span_end(int64_t time) { cpu.append<trace::SpanEndRecord>(RecordKind::kSpanEnd, t(time)); }
  // A kernel launched by a cudaLaunchKernel call at `launch_time`.
  void kernel(int64_t launch_time, int64_t start, int64_t end, uint32_t name, uint32_t stream,
              int64_t call_ns = 800) {  // 800 ns: launches 1 us apart never overlap
    uint32_t correlation = next_correlation++;
    auto& call = cpu.append<trace::ApiCallRecord>(RecordKind::kApiCall, t(launch_time), kLaunch);
    call.end_time = t(launch_time + call_ns);
    call.correlation_id = correlation;
    auto& k = gpu.append<trace::GpuKernelRecord>(RecordKind::kGpuKernel, t(start), name);
    k.end_time = t(end);
    k.correlation_id = correlation;
    k.device = 0;
    k.stream = stream;
    k.grid[0] = 132, k.grid[1] = 1, k.grid[2] = 1;
    k.block[0] = 256, k.block[1] = 1, k.block[2] = 1;
  }
  uint64_t allocate(int64_t time, uint64_t bytes, uint16_t category) {
    uint64_t address = next_address;
    next_address += bytes + 4096;
    auto& m = cpu.append<trace::MemoryRecord>(RecordKind::kMemory, t(time));
    m.address = address;
    m.bytes = bytes;
    m.device = 0;
    m.category = category;
    m.is_free = 0;
    return address;
  }
  void release(int64_t time, uint64_t address, uint64_t bytes, uint16_t category) {
    auto& m = cpu.append<trace::MemoryRecord>(RecordKind::kMemory, t(time));
    m.address = address;
    m.bytes = bytes;
    m.device = 0;
    m.category = category;
    m.is_free = 1;
  }
};

}  // namespace

std::string nasty_span_name() {
  return std::string(
      "say \"hi\" \\ back\\slash\ttab\nnewline\x01\x1f ctrl caf\xc3\xa9 \xe2\x9c\x93 "
      "\xf0\x9f\x98\x80 </script>");
}

namespace {

// The directories this process made, removed when it exits (unless MOESCOPE_KEEP_TEST_FILES is
// set). Only by the process that made them: a forked child leaving must not take them along.
struct TestDirectories {
  pid_t owner = getpid();
  std::vector<std::string> made;
  ~TestDirectories() {
    if (getpid() != owner || std::getenv("MOESCOPE_KEEP_TEST_FILES")) return;
    std::error_code ignored;
    for (const std::string& directory : made) std::filesystem::remove_all(directory, ignored);
  }
};

}  // namespace

std::string test_directory(const std::string& name) {
  // One directory per process: CTest runs every test case as its own process, two at a time
  // (-j2), and several cases share a name ("read_time_index"). A shared directory was removed
  // by one case while another was still reading its file from it.
  static TestDirectories directories;
  std::string directory =
      ::testing::TempDir() + "/moescope_analysis_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  if (std::find(directories.made.begin(), directories.made.end(), directory) ==
      directories.made.end()) {
    directories.made.push_back(directory);
  }
  return directory;
}

std::string helper_script(const std::string& name) {
  const char* source = std::getenv("MOESCOPE_SOURCE_DIR");
  if (source && *source) return std::string(source) + "/tests/analysis/" + name;
  return std::string(MOESCOPE_ANALYSIS_TEST_DIR) + "/" + name;
}

std::vector<std::string> write_synthetic_run(const std::string& directory, const std::string& stem,
                                             const SyntheticOptions& o) {
  const int R = o.num_ranks, L = o.num_layers, E = o.num_experts;
  std::vector<RankWriter> ranks(R);
  for (int r = 0; r < R; ++r) {
    int host = o.ranks_per_host > 0 ? r / o.ranks_per_host : 0;
    ranks[r].skew = host > 0 ? o.host_clock_skew_ns * host : 0;
  }
  std::mt19937 rng(1234);
  // +-10 tokens; less for runs of a few tokens, whose counts must stay >= 0.
  const int jitter_tokens = std::min(10, o.tokens_per_expert / 4);
  std::uniform_int_distribution<int> jitter(-jitter_tokens, jitter_tokens);
  uint32_t sequence = 0;
  int64_t now = 1000 * kMs;  // common clock before skew
  // Weights allocated once.
  for (int r = 0; r < R; ++r) {
    ranks[r].allocate(now - kMs, 512ull << 20, 1);
    auto& info = ranks[r].cpu.append<trace::ThreadInfoRecord>(RecordKind::kThreadInfo,
                                                              ranks[r].t(now - kMs), kThreadName);
    info.os_thread_id = 4242 + r;
  }
  const double a2a = o.unoverlapped_a2a ? o.exposed_a2a_ms : o.a2a_ms;
  for (int step = 0; step < o.num_steps; ++step) {
    const int64_t step_start = now;
    std::vector<uint64_t> activations(R);
    for (int r = 0; r < R; ++r) {
      RankWriter& w = ranks[r];
      if (o.write_step_markers) {
        w.cpu.append<trace::StepRecord>(RecordKind::kStep, w.t(step_start)).step = step;
      }
      if (o.clock_sync_points && step == 0) {
        w.cpu.append<trace::ClockSyncRecord>(RecordKind::kClockSync, w.t(step_start)).sync_id = 77;
      }
      w.span_begin(step_start, kStepRange);
      activations[r] = w.allocate(step_start + 1000, 64ull << 20, 4);
      if (o.nasty_names) {
        w.span_begin(step_start + 2000, kNastyName);
        w.span_end(step_start + 3000);
      }
    }
    int64_t t = step_start + ms(0.01);
    for (int layer = 0; layer < L; ++layer) {
      // Tokens each rank sends to each expert this step: [R][E].
      std::vector<std::vector<int64_t>> tokens(R, std::vector<int64_t>(E));
      for (int r = 0; r < R; ++r) {
        for (int e = 0; e < E; ++e) {
          double value = o.tokens_per_expert + jitter(rng);
          if (layer == o.hot_layer && e == o.hot_expert) value *= o.hot_factor;
          if (layer == o.dead_layer &&
              std::find(o.dead_experts.begin(), o.dead_experts.end(), e) != o.dead_experts.end()) {
            value = 0;
          }
          if (layer == o.collapse_layer && e >= 2 && o.num_steps > 1) {
            value *= 1.0 - 0.99 * double(step) / double(o.num_steps - 1);
          }
          tokens[r][e] = static_cast<int64_t>(value);
        }
      }
      const int64_t route_end = t + ms(o.route_ms);
      const int64_t dispatch_end = route_end + ms(a2a);
      const int64_t after_dispatch = o.unoverlapped_a2a ? dispatch_end : dispatch_end + ms(0.1);
      std::vector<int64_t> experts_end(R);
      int64_t slowest = 0;
      for (int r = 0; r < R; ++r) {
        double factor = r == o.slow_rank ? o.slow_factor : 1.0;
        experts_end[r] = after_dispatch + ms(o.expert_ms * factor);
        slowest = std::max(slowest, experts_end[r]);
      }
      const int64_t combine_end = slowest + ms(a2a);
      int64_t layer_end = combine_end;
      for (int r = 0; r < R; ++r) {
        RankWriter& w = ranks[r];
        const int64_t launch = t - ms(0.2);
        w.span_begin(t, kLayerSpan);
        w.span_begin(t, kRouteSpan);
        w.kernel(launch, t, route_end, kRouterKernel, kComputeStream);
        w.span_end(route_end);
        w.span_begin(route_end, kDispatchSpan);
        // Dispatch all-to-all: row of this rank = tokens for experts of each destination rank.
        auto comm = [&](int64_t start, int64_t end, uint32_t name) {
          std::vector<uint64_t> splits(R, 0);
          for (int e = 0; e < E; ++e) {
            splits[size_t(e * R / E)] += uint64_t(tokens[r][e]) * kBytesPerToken;
          }
          uint64_t bytes = 0;
          for (uint64_t s : splits) bytes += s;
          auto& op = w.gpu.append_sized<trace::CommOpRecord>(
              RecordKind::kCommOp, w.t(start - 10000), name, uint32_t(R * sizeof(uint64_t)));
          op.start_time = w.t(start);
          op.end_time = w.t(end);
          op.count = bytes / 2;
          op.bytes = bytes;
          op.comm_id = kCommId;
          op.kind = 6;
          op.dtype = 7;
          op.rank = r;
          op.num_ranks = R;
          op.peer = -1;
          op.root = -1;
          op.device = 0;
          op.stream = kCommStream;
          op.sequence = sequence;
          op.num_splits = uint32_t(R);
          std::memcpy(w.gpu.tail<trace::CommOpRecord>(), splits.data(), R * sizeof(uint64_t));
          w.kernel(launch + 1000, start, end, kNcclKernel, kCommStream);
        };
        comm(route_end, dispatch_end, kDispatchOp);
        if (!o.unoverlapped_a2a) {
          w.kernel(launch + 2000, route_end, after_dispatch, kSharedKernel, kComputeStream);
        }
        w.span_end(after_dispatch);
        w.span_begin(after_dispatch, kExpertsSpan);
        w.kernel(launch + 3000, after_dispatch, experts_end[r], kExpertKernel, kComputeStream);
        w.span_end(experts_end[r]);
        w.span_begin(experts_end[r], kCombineSpan);
        comm(experts_end[r], combine_end, kCombineOp);
        int64_t end = combine_end;
        if (!o.unoverlapped_a2a) {
          int64_t shared_end = experts_end[r] + ms(a2a + 0.1);
          w.kernel(launch + 4000, experts_end[r], shared_end, kSharedKernel, kComputeStream);
          end = std::max(end, shared_end);
        }
        w.span_end(end);
        w.span_end(end);
        layer_end = std::max(layer_end, end);
        // Expert load and router statistics of this rank.
        int64_t dropped = 0;
        int64_t total = 0;
        for (int64_t v : tokens[r]) total += v;
        if (layer == o.drop_layer) {
          dropped = static_cast<int64_t>(
              std::llround(double(total) * o.drop_fraction / (1.0 - o.drop_fraction)));
        }
        auto& load = w.cpu.append_sized<trace::ExpertLoadRecord>(
            RecordKind::kExpertLoad, w.t(route_end), 0, uint32_t(E * sizeof(uint32_t)));
        load.step = step;
        load.layer = uint32_t(layer);
        load.rank = r;
        load.scope = 0;
        load.num_experts = uint32_t(E);
        load.dropped_tokens = uint64_t(dropped);
        auto* counts = reinterpret_cast<uint32_t*>(w.cpu.tail<trace::ExpertLoadRecord>());
        for (int e = 0; e < E; ++e) counts[e] = uint32_t(tokens[r][e]);
        double entropy = 0;
        for (int64_t v : tokens[r]) {
          if (v > 0) entropy -= double(v) / double(total) * std::log(double(v) / double(total));
        }
        if (o.predictions && r == 0) {
          // Predicted global load: 10% above the actual sum over ranks.
          auto& values = w.cpu.append_sized<trace::ExpertValuesRecord>(
              RecordKind::kExpertValues, w.t(route_end), 0, uint32_t(E * sizeof(float)));
          values.step = step;
          values.layer = uint32_t(layer);
          values.rank = r;
          values.quantity = 0;
          values.num_experts = uint32_t(E);
          auto* predicted = reinterpret_cast<float*>(w.cpu.tail<trace::ExpertValuesRecord>());
          for (int e = 0; e < E; ++e) {
            double sum = 0;
            for (int q = 0; q < R; ++q) sum += double(tokens[q][e]);
            predicted[e] = float(sum * 1.1);
          }
          auto& rebalance =
              w.cpu.append<trace::RebalanceRecord>(RecordKind::kRebalance, w.t(route_end));
          rebalance.step = step;
          rebalance.layer = uint32_t(layer);
          rebalance.rank = r;
          rebalance.imbalance_before = 2.0f;
          rebalance.imbalance_after = 1.25f;
          rebalance.bytes_moved = 1u << 20;
          rebalance.duration_ns = 500000;
          rebalance.applied = step % 2 == 0;
        }
        auto& stats =
            w.cpu.append<trace::LayerStatsRecord>(RecordKind::kLayerStats, w.t(route_end));
        stats.step = step;
        stats.layer = uint32_t(layer);
        stats.rank = r;
        stats.aux_loss = 1.0f;
        stats.z_loss = NAN;
        stats.router_entropy = float(entropy);
        stats.max_over_mean = 1.0f;
        bool bad = step == o.nan_step && layer == o.nan_layer && r == o.nan_rank;
        stats.nonfinite_logits = bad ? 12 : 0;
        stats.nonfinite_outputs = bad ? 3 : 0;
      }
      ++sequence;
      t = layer_end;
    }
    // Tiny kernels the host launches one by one after the last ended: the GPU idles between.
    for (int i = 0; i < o.late_launch_kernels; ++i) {
      for (int r = 0; r < R; ++r) {
        ranks[r].kernel(t, t + 30000, t + 40000, kRouterKernel, kComputeStream, 29000);
      }
      t += 40000;
    }
    // Optimizer, optional sync, churn, step end.
    int64_t step_end = t + ms(o.optimizer_ms);
    for (int r = 0; r < R; ++r) {
      RankWriter& w = ranks[r];
      w.kernel(t - ms(0.1), t, step_end, kOptimizerKernel, kComputeStream);
      for (int i = 0; i < o.churn_allocations_per_step; ++i) {
        int64_t at = step_start + ms(0.02) + i * 2000;
        uint64_t address = w.allocate(at, 1ull << 20, 3);
        w.release(at + 1000, address, 1ull << 20, 3);
      }
    }
    if (o.sync_per_step) {
      // The host copies token counts to the CPU and waits: the GPU then idles while the host
      // catches up with its launches.
      int64_t copy_start = step_end;
      int64_t copy_end = copy_start + ms(0.05);
      for (int r = 0; r < R; ++r) {
        RankWriter& w = ranks[r];
        auto& copy =
            w.gpu.append<trace::GpuCopyRecord>(RecordKind::kGpuCopy, w.t(copy_start), kCopyName);
        copy.end_time = w.t(copy_end);
        copy.bytes = uint64_t(E) * 8;
        copy.device = 0;
        copy.stream = kComputeStream;
        copy.copy_kind = 2;
        auto& sync =
            w.gpu.append<trace::GpuSyncRecord>(RecordKind::kGpuSync, w.t(copy_end - ms(o.sync_ms)));
        sync.end_time = w.t(copy_end);
        sync.sync_kind = 2;
        sync.device = 0;
        sync.stream = kComputeStream;
      }
      step_end = copy_end + ms(0.2);
    }
    for (int r = 0; r < R; ++r) {
      RankWriter& w = ranks[r];
      w.release(step_end - 1000, activations[r], 64ull << 20, 4);
      w.span_end(step_end);
    }
    now = step_end;
  }
  // Files: events first, strings last (as the recorder writes them).
  std::vector<std::string> paths;
  for (int r = 0; r < R; ++r) {
    int host = o.ranks_per_host > 0 ? r / o.ranks_per_host : 0;
    nlohmann::json metadata = {{"format", "moescope"},
                               {"host", o.host_prefix + std::to_string(host)},
                               {"pid", 1000 + r},
                               {"rank", r},
                               {"world_size", R},
                               {"clock", "CLOCK_MONOTONIC"},
                               {"start_ns", 1000 * kMs + ranks[r].skew},
                               {"start_unix_ns", int64_t(1700000000) * 1000000000 + 1000 * kMs}};
    if (o.device_memory_bytes) metadata["device_memory_bytes"] = o.device_memory_bytes;
    std::string path = directory + "/" + stem + "." + std::to_string(r) + ".moetrace";
    trace::TraceWriter writer;
    if (!writer.open(path, metadata.dump())) {
      ADD_FAILURE() << writer.error();
      continue;
    }
    writer.write_chunk(1, ranks[r].cpu.bytes());
    writer.write_chunk(2, ranks[r].gpu.bytes());
    RecordBuffer strings;
    for (uint32_t id = 1; id < kNumNames; ++id) {
      strings.define_string(id, id == kNastyName ? nasty_span_name() : std::string(kNames[id]));
    }
    strings.append<trace::StatsRecord>(RecordKind::kStats, 0);
    writer.write_chunk(0, strings.bytes(), trace::ChunkType::kEnd);
    writer.close();
    paths.push_back(path);
  }
  return paths;
}

}  // namespace moescope::testing
