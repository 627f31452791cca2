// All-to-all matrices and bandwidth (see comm_analysis.h).
#include "moescope/analysis/comm_analysis.h"

#include <algorithm>
#include <map>

namespace moescope::analysis {

const char* comm_kind_name(uint32_t kind) {
  static const char* const kNames[] = {
      "unknown", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
      "send",    "recv",       "barrier",    "init",           "destroy",   "gather", "scatter"};
  return kind < sizeof(kNames) / sizeof(kNames[0]) ? kNames[kind] : "unknown";
}

uint64_t AllToAllMatrix::max_bytes() const {
  return bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
}

double AllToAllMatrix::receive_imbalance() const {
  if (num_ranks <= 0) return 0;
  std::vector<double> received(size_t(num_ranks), 0.0);
  for (int32_t src = 0; src < num_ranks; ++src) {
    for (int32_t dst = 0; dst < num_ranks; ++dst) received[dst] += double(at(src, dst));
  }
  double total = 0, max = 0;
  for (double r : received) total += r, max = std::max(max, r);
  return total > 0 ? max / (total / num_ranks) : 0.0;
}

CommAnalysis analyze_communication(const TraceModel& model, const StepRankFilter& filter) {
  CommAnalysis result;
  std::map<uint64_t, AllToAllMatrix> matrices;
  std::map<std::pair<std::string, uint32_t>, CommOpStats> stats;
  for (const auto& process : model.processes) {
    if (!filter.has_rank(process.rank)) continue;
    const TimeWindow window = step_window(model, process, filter);
    for (const auto& comm : process.communicators) {
      for (const CommOp& op : comm.ops) {
        if (!window.contains(op.start)) continue;
        const std::string& name = model.name(op.name);
        CommOpStats& entry = stats[{name.empty() ? comm_kind_name(op.kind) : name, op.kind}];
        entry.name = name.empty() ? comm_kind_name(op.kind) : name;
        entry.kind = op.kind;
        if (!(op.flags & kCommEndUnknown) && op.end > op.start) {
          double seconds = double(op.end - op.start) * 1e-9;
          double gbps = double(op.bytes) / seconds * 1e-9;
          entry.mean_gbps += gbps;  // divided by the count below
          entry.min_gbps = entry.count ? std::min(entry.min_gbps, gbps) : gbps;
          entry.max_gbps = std::max(entry.max_gbps, gbps);
          entry.total_ms += seconds * 1e3;
          ++entry.count;
        }
        entry.bytes += op.bytes;
        if (op.kind != kCommKindAllToAll || op.num_splits == 0) continue;
        int32_t ranks = std::max<int32_t>(comm.num_ranks, int32_t(op.num_splits));
        AllToAllMatrix& matrix = matrices[comm.comm_id];
        if (matrix.num_ranks < ranks) {
          // Grow, keeping what is there.
          AllToAllMatrix grown;
          grown.comm_id = comm.comm_id;
          grown.num_ranks = ranks;
          grown.num_ops = matrix.num_ops;
          grown.bytes.assign(size_t(ranks) * ranks, 0);
          for (int32_t s = 0; s < matrix.num_ranks; ++s) {
            for (int32_t d = 0; d < matrix.num_ranks; ++d) {
              grown.bytes[size_t(s) * ranks + d] = matrix.at(s, d);
            }
          }
          grown.ops_by_rank = std::move(matrix.ops_by_rank);
          grown.sent_bytes = std::move(matrix.sent_bytes);
          grown.busy_ns = std::move(matrix.busy_ns);
          grown.ops_by_rank.resize(size_t(ranks), 0);
          grown.sent_bytes.resize(size_t(ranks), 0);
          grown.busy_ns.resize(size_t(ranks), 0.0);
          matrix = std::move(grown);
        }
        if (op.rank < 0 || op.rank >= matrix.num_ranks) continue;
        auto splits = comm.splits(op);
        for (uint32_t dst = 0; dst < splits.size(); ++dst) {
          matrix.bytes[size_t(op.rank) * matrix.num_ranks + dst] += splits[dst];
          matrix.sent_bytes[size_t(op.rank)] += splits[dst];
        }
        if (!(op.flags & kCommEndUnknown) && op.end > op.start) {
          matrix.busy_ns[size_t(op.rank)] += double(op.end - op.start);
        }
        ++matrix.ops_by_rank[size_t(op.rank)];
        ++matrix.num_ops;
      }
    }
  }
  for (auto& [id, matrix] : matrices) result.all_to_all.push_back(std::move(matrix));
  for (auto& [key, entry] : stats) {
    if (entry.count) entry.mean_gbps /= entry.count;
    result.ops.push_back(std::move(entry));
  }
  std::sort(result.ops.begin(), result.ops.end(),
            [](const CommOpStats& a, const CommOpStats& b) { return a.total_ms > b.total_ms; });
  return result;
}

std::vector<CommKindSteps> communication_per_step(const TraceModel& model) {
  const std::vector<int64_t> steps = known_steps(model);
  auto step_index = [&](int64_t step) {
    return size_t(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
  };
  std::vector<double> ranks_with_step(steps.size(), 0.0);
  std::map<uint32_t, CommKindSteps> kinds;
  for (const auto& process : model.processes) {
    for (const StepInterval& step : process.steps) ranks_with_step[step_index(step.step)] += 1.0;
    for (const auto& comm : process.communicators) {
      for (const CommOp& op : comm.ops) {
        const int at = step_at(process, op.start);
        if (at < 0) continue;
        CommKindSteps& entry = kinds[op.kind];
        if (entry.steps.empty()) {
          entry.kind = op.kind;
          entry.steps = steps;
          entry.ops.assign(steps.size(), 0.0);
          entry.bytes.assign(steps.size(), 0.0);
          entry.ms.assign(steps.size(), 0.0);
        }
        const size_t i = step_index(process.steps[size_t(at)].step);
        entry.ops[i] += 1.0;
        entry.bytes[i] += double(op.bytes);
        if (!(op.flags & kCommEndUnknown) && op.end > op.start) {
          entry.ms[i] += double(op.end - op.start) * 1e-6;
        }
      }
    }
  }
  std::vector<CommKindSteps> result;
  for (auto& [kind, entry] : kinds) {
    for (size_t i = 0; i < steps.size(); ++i) {
      if (ranks_with_step[i] <= 0) continue;
      entry.ops[i] /= ranks_with_step[i];
      entry.bytes[i] /= ranks_with_step[i];
      entry.ms[i] /= ranks_with_step[i];
    }
    result.push_back(std::move(entry));
  }
  return result;
}

}  // namespace moescope::analysis
