#include "diff_run_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "moescope/trace/trace_writer.h"

namespace moescope::testing {
namespace {

using trace::RecordBuffer;
using trace::RecordKind;

enum Name : uint32_t {
  kPhaseDomain = 1,
  kModuleDomain,
  kForward,
  kBackward,
  kOptimizer,
  kAllToAll,
  kAllReduce,
  kThreadName,
  kStatisticsName,
  kReplicaSyncName,
  kFirstLayerName,  // model.layers.0.mlp, then one per layer
};

constexpr int64_t kNsPerMs = 1000000;
constexpr uint64_t kBytesPerRow = 1024;
constexpr double kBytesPerMiB = 1024.0 * 1024.0;

int64_t ns(double ms) {
  return static_cast<int64_t>(std::llround(ms * double(kNsPerMs)));
}

void comm_op(RecordBuffer& out, int64_t start, int64_t end, uint32_t name, uint32_t kind, int rank,
             int ranks, uint32_t sequence, const std::vector<uint64_t>& splits, uint64_t bytes) {
  auto& op = out.append_sized<trace::CommOpRecord>(RecordKind::kCommOp, uint64_t(start), name,
                                                   uint32_t(splits.size() * sizeof(uint64_t)));
  op.start_time = uint64_t(start);
  op.end_time = uint64_t(end);
  op.count = bytes / 4;
  op.bytes = bytes;
  op.comm_id = 0xD1FFull;
  op.kind = kind;
  op.dtype = 7;
  op.rank = rank;
  op.num_ranks = ranks;
  op.peer = -1;
  op.root = -1;
  op.device = -1;
  op.sequence = sequence;
  op.num_splits = uint32_t(splits.size());
  if (!splits.empty()) {
    std::memcpy(out.tail<trace::CommOpRecord>(), splits.data(), splits.size() * sizeof(uint64_t));
  }
}

void expert_load(RecordBuffer& out, int64_t time, int64_t step, int layer, int rank, uint32_t scope,
                 const std::vector<uint32_t>& counts) {
  auto& load = out.append_sized<trace::ExpertLoadRecord>(
      RecordKind::kExpertLoad, uint64_t(time), 0, uint32_t(counts.size() * sizeof(uint32_t)));
  load.step = step;
  load.layer = uint32_t(layer);
  load.rank = rank;
  load.scope = scope;
  load.num_experts = uint32_t(counts.size());
  load.dropped_tokens = 0;
  std::memcpy(out.tail<trace::ExpertLoadRecord>(), counts.data(), counts.size() * sizeof(uint32_t));
}

}  // namespace

std::vector<std::string> write_diff_run(const std::string& directory, const std::string& stem,
                                        const DiffRunOptions& o) {
  const int R = o.num_ranks, L = o.num_layers, E = o.num_experts;
  std::vector<RecordBuffer> out(static_cast<size_t>(R));
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> noise(0.0, o.noise_ms);
  std::uniform_int_distribution<int> jitter(-10, 10);
  auto duration = [&](double ms) { return ns(std::max(0.01, ms + noise(rng))); };
  auto span_begin = [&](int r, int64_t time, uint32_t name, uint32_t domain) {
    out[size_t(r)]
        .append<trace::SpanBeginRecord>(RecordKind::kSpanBegin, uint64_t(time), name)
        .domain = domain;
  };
  auto span_end = [&](int r, int64_t time) {
    out[size_t(r)].append<trace::SpanEndRecord>(RecordKind::kSpanEnd, uint64_t(time));
  };
  uint32_t sequence = 0;
  int64_t now = 1000 * kNsPerMs;
  for (int r = 0; r < R; ++r) {
    out[size_t(r)]
        .append<trace::ThreadInfoRecord>(RecordKind::kThreadInfo, uint64_t(now - 1), kThreadName)
        .os_thread_id = uint32_t(5000 + r);
  }
  for (int step = 0; step < o.num_steps; ++step) {
    for (int r = 0; r < R; ++r) {
      out[size_t(r)].append<trace::StepRecord>(RecordKind::kStep, uint64_t(now)).step = step;
      span_begin(r, now, kForward, kPhaseDomain);
    }
    int64_t t = now;
    for (int layer = 0; layer < L; ++layer) {
      // Tokens rank q's router sends to each expert: [R][E].
      std::vector<std::vector<uint32_t>> tokens(static_cast<size_t>(R),
                                                std::vector<uint32_t>(static_cast<size_t>(E)));
      for (int q = 0; q < R; ++q) {
        for (int e = 0; e < E; ++e) {
          double value = o.tokens_per_expert + jitter(rng);
          if (layer == o.hot_layer && e == 0) value *= o.hot_factor;
          tokens[size_t(q)][size_t(e)] = uint32_t(value);
        }
        if (layer == o.moved_layer) {
          auto moved = uint32_t(double(tokens[size_t(q)][1]) * o.moved_share);
          tokens[size_t(q)][1] -= moved;
          tokens[size_t(q)][0] += moved;
        }
      }
      // Rows each rank's experts compute (experts split contiguously), or an even share.
      std::vector<double> rows(static_cast<size_t>(R), 0.0);
      double total_rows = 0;
      for (int q = 0; q < R; ++q) {
        for (int e = 0; e < E; ++e) {
          rows[size_t(e * R / E)] += tokens[size_t(q)][size_t(e)];
          total_rows += tokens[size_t(q)][size_t(e)];
        }
      }
      if (o.balanced_rows) std::fill(rows.begin(), rows.end(), total_rows / R);
      std::vector<int64_t> compute_end(static_cast<size_t>(R));
      int64_t slowest = t;
      for (int r = 0; r < R; ++r) {
        compute_end[size_t(r)] = t + duration(o.layer_ms + rows[size_t(r)] * o.ms_per_row);
        slowest = std::max(slowest, compute_end[size_t(r)]);
      }
      // Once every rank has arrived, the collective takes a2a_ms + the busiest receiver's bytes x
      // a2a_ms_per_mib on every rank; with a cost per byte the op stands for the combine: it
      // sends back the rows the rank computed.
      const double busiest_bytes = *std::max_element(rows.begin(), rows.end()) * kBytesPerRow;
      const int64_t layer_end =
          slowest + ns(o.a2a_ms + busiest_bytes / kBytesPerMiB * o.a2a_ms_per_mib);
      for (int r = 0; r < R; ++r) {
        RecordBuffer& w = out[size_t(r)];
        expert_load(w, t, step, layer, r, 0, tokens[size_t(r)]);
        // RECEIVED: rows per local expert slot; the rank's total is what matters here.
        const int local = std::max(1, E / R);
        std::vector<uint32_t> received(static_cast<size_t>(local), 0);
        uint32_t assigned = 0;
        for (int k = 0; k < local; ++k) {
          received[size_t(k)] = uint32_t(rows[size_t(r)] / local);
          assigned += received[size_t(k)];
        }
        received[0] += uint32_t(std::llround(rows[size_t(r)])) - assigned;
        expert_load(w, t, step, layer, r, 2, received);
        span_begin(r, t, kFirstLayerName + uint32_t(layer), kModuleDomain);
        span_end(r, compute_end[size_t(r)]);
        std::vector<uint64_t> splits(static_cast<size_t>(R), 0);
        uint64_t bytes = 0;
        for (int e = 0; e < E; ++e) {
          splits[size_t(e * R / E)] += uint64_t(tokens[size_t(r)][size_t(e)]) * kBytesPerRow;
          bytes += uint64_t(tokens[size_t(r)][size_t(e)]) * kBytesPerRow;
        }
        if (o.a2a_ms_per_mib > 0) bytes = uint64_t(std::llround(rows[size_t(r)])) * kBytesPerRow;
        comm_op(w, compute_end[size_t(r)], layer_end, kAllToAll, 6, r, R, sequence, splits, bytes);
      }
      ++sequence;
      t = layer_end;
    }
    int64_t forward_end = t + ns(o.forward_extra_ms);
    // Backward with the gradient all-reduce at its end (waits for the slowest rank).
    std::vector<int64_t> backward_compute(static_cast<size_t>(R));
    int64_t slowest = forward_end;
    for (int r = 0; r < R; ++r) {
      span_end(r, forward_end);
      span_begin(r, forward_end, kBackward, kPhaseDomain);
      backward_compute[size_t(r)] = forward_end + duration(o.backward_ms);
      slowest = std::max(slowest, backward_compute[size_t(r)]);
    }
    auto allreduce_cost = [&](uint64_t bytes) {
      return ns(o.allreduce_ms + double(bytes) / kBytesPerMiB * o.allreduce_ms_per_mib);
    };
    int64_t backward_end = slowest + allreduce_cost(o.allreduce_bytes);
    for (int r = 0; r < R; ++r) {
      comm_op(out[size_t(r)], backward_compute[size_t(r)], backward_end, kAllReduce, 1, r, R,
              sequence, {}, o.allreduce_bytes);
    }
    ++sequence;
    // More all-reduces back to back: statistics, then the replicas' gradients.
    std::vector<std::pair<uint32_t, uint64_t>> more;
    if (o.allreduce_ms_per_mib > 0) more.push_back({kStatisticsName, o.statistics_bytes});
    for (int k = 0; k < o.replica_sync_ops; ++k)
      more.push_back({kReplicaSyncName, o.replica_sync_bytes});
    for (const auto& [name, bytes] : more) {
      const int64_t end = backward_end + allreduce_cost(bytes);
      for (int r = 0; r < R; ++r) {
        comm_op(out[size_t(r)], backward_end, end, name, 1, r, R, sequence, {}, bytes);
      }
      ++sequence;
      backward_end = end;
    }
    int64_t step_end = backward_end;
    std::vector<int64_t> optimizer_end(static_cast<size_t>(R));
    for (int r = 0; r < R; ++r) {
      span_end(r, backward_end);
      span_begin(r, backward_end, kOptimizer, kPhaseDomain);
      optimizer_end[size_t(r)] = backward_end + duration(o.optimizer_ms);
      span_end(r, optimizer_end[size_t(r)]);
      step_end = std::max(step_end, optimizer_end[size_t(r)]);
    }
    if (o.rebalance_every > 0 && step % o.rebalance_every == o.rebalance_every - 1) {
      const int index = step / o.rebalance_every;
      const uint64_t bytes = o.migration_bytes * uint64_t(1 + index % 3);
      const double ms = o.migration_ms + double(bytes) / kBytesPerMiB * o.migration_ms_per_mib;
      for (int r = 0; r < R; ++r) {
        for (int layer = 0; layer < L; ++layer) {
          auto& decision = out[size_t(r)].append<trace::RebalanceRecord>(RecordKind::kRebalance,
                                                                         uint64_t(step_end));
          decision.step = step;
          decision.layer = uint32_t(layer);
          decision.rank = r;
          decision.imbalance_before = 1.5f;
          decision.imbalance_after = 1.0f;
          decision.bytes_moved = bytes;
          decision.duration_ns = uint64_t(ns(ms));
          decision.applied = 1;
        }
      }
      step_end += ns(ms) * L;
    }
    now = step_end + ns(0.01);
  }
  std::vector<std::string> paths;
  for (int r = 0; r < R; ++r) {
    nlohmann::json metadata = {{"format", "moescope"},
                               {"host", "node0"},
                               {"pid", 2000 + r},
                               {"rank", r},
                               {"world_size", R},
                               {"clock", "CLOCK_MONOTONIC"},
                               {"start_ns", 1000 * kNsPerMs}};
    std::string path = directory + "/" + stem + "." + std::to_string(r) + ".moetrace";
    trace::TraceWriter writer;
    if (!writer.open(path, metadata.dump())) {
      ADD_FAILURE() << writer.error();
      continue;
    }
    writer.write_chunk(1, out[size_t(r)].bytes());
    RecordBuffer strings;
    const char* const kFixed[] = {"",         "moescope.phase", "moescope.module", "forward",
                                  "backward", "optimizer",      "all_to_all",      "all_reduce",
                                  "main",     "ar.statistics",  "ar.replica_sync"};
    for (uint32_t id = 1; id < kFirstLayerName; ++id) strings.define_string(id, kFixed[id]);
    for (int layer = 0; layer < L; ++layer) {
      strings.define_string(kFirstLayerName + uint32_t(layer),
                            "model.layers." + std::to_string(layer) + ".mlp");
    }
    strings.append<trace::StatsRecord>(RecordKind::kStats, 0);
    writer.write_chunk(0, strings.bytes(), trace::ChunkType::kEnd);
    writer.close();
    paths.push_back(path);
  }
  return paths;
}

}  // namespace moescope::testing
