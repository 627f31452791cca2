// Wait vs transfer per collective, from ops matched across ranks (see collective_wait.h).
#include "moescope/analysis/collective_wait.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {
namespace {

// One rank's copy of a collective op.
struct RankOp {
  size_t process = 0;
  const CommOp* op = nullptr;
  int64_t step = -1;  // the rank's step the op starts in; -1 outside every step
  bool in_step = false;
};

// Whether a communicator's sequence numbers name its ops (distinct); else ops are matched by
// their position in the communicator.
bool sequences_are_distinct(const CommunicatorTrack& comm) {
  std::set<uint32_t> seen;
  for (const CommOp& op : comm.ops) {
    if (!seen.insert(op.sequence).second) return false;
  }
  return true;
}

struct RankTotals {
  RankCollectiveWait totals;
  std::map<int64_t, std::pair<double, double>> by_step;  // step -> (wait, transfer) ms
};

}  // namespace

RankCollectiveWait CollectiveWaits::of_rank(int32_t rank) const {
  for (const RankCollectiveWait& entry : ranks) {
    if (entry.rank == rank) return entry;
  }
  RankCollectiveWait none;
  none.rank = rank;
  return none;
}

CollectiveWaits analyze_collective_waits(const TraceModel& model) {
  // (comm_id, key) -> the op on each rank; and which processes have each communicator.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<RankOp>> groups;
  std::map<uint64_t, std::set<size_t>> members;
  for (size_t p = 0; p < model.processes.size(); ++p) {
    const ProcessTrack& process = model.processes[p];
    for (const CommunicatorTrack& comm : process.communicators) {
      members[comm.comm_id].insert(p);
      const bool by_sequence = sequences_are_distinct(comm);
      for (size_t i = 0; i < comm.ops.size(); ++i) {
        const CommOp& op = comm.ops[i];
        const int at = step_at(process, op.start);
        RankOp entry{p, &op, at >= 0 ? process.steps[size_t(at)].step : -1,
                     at >= 0 || process.steps.empty()};
        groups[{comm.comm_id, by_sequence ? uint64_t(op.sequence) : uint64_t(i)}].push_back(entry);
      }
    }
  }

  // (kind, process) -> totals; kind -> matched / unmatched op counts.
  std::map<std::pair<uint32_t, size_t>, RankTotals> per_rank;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> op_counts;
  for (const auto& [key, ops] : groups) {
    const size_t expected = members[key.first].size();
    bool matched = expected >= 2 && ops.size() == expected;
    for (const RankOp& entry : ops) {
      matched = matched && entry.op->kind == ops.front().op->kind &&
                entry.step == ops.front().step && !(entry.op->flags & kCommEndUnknown) &&
                entry.op->end >= entry.op->start;
    }
    const uint32_t kind = ops.front().op->kind;
    if (!matched) {
      op_counts[kind].second += uint32_t(ops.size());
      continue;
    }
    ++op_counts[kind].first;
    TimeNs last_entry = ops.front().op->start;
    size_t last = 0;
    for (size_t i = 1; i < ops.size(); ++i) {
      if (ops[i].op->start > last_entry) last_entry = ops[i].op->start, last = i;
    }
    double others_wait_ms = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = *ops[i].op;
      const TimeNs wait = std::clamp<TimeNs>(last_entry - op.start, 0, op.duration());
      const double wait_ms = double(wait) * 1e-6;
      const double transfer_ms = double(op.duration() - wait) * 1e-6;
      if (i != last) others_wait_ms += wait_ms;
      if (!ops[i].in_step) continue;
      RankTotals& rank = per_rank[{kind, ops[i].process}];
      ++rank.totals.ops;
      rank.totals.wait_ms += wait_ms;
      rank.totals.transfer_ms += transfer_ms;
      if (ops[i].step >= 0) {
        auto& step = rank.by_step[ops[i].step];
        step.first += wait_ms;
        step.second += transfer_ms;
      }
    }
    if (ops[last].in_step) {
      RankTotals& rank = per_rank[{kind, ops[last].process}];
      ++rank.totals.arrived_last;
      rank.totals.caused_wait_ms += others_wait_ms / double(ops.size() - 1);
    }
  }

  const std::vector<int64_t> steps = known_steps(model);
  std::map<uint32_t, CollectiveKindWait> kinds;
  std::map<int32_t, RankCollectiveWait> all_kinds;
  for (auto& [key, entry] : per_rank) {
    const auto [kind, p] = key;
    const ProcessTrack& process = model.processes[p];
    const double rank_steps = double(std::max<size_t>(1, process.steps.size()));
    RankCollectiveWait rank = entry.totals;
    rank.rank = process.rank;
    rank.mean_wait_ms = rank.ops ? rank.wait_ms / rank.ops : 0.0;
    rank.mean_transfer_ms = rank.ops ? rank.transfer_ms / rank.ops : 0.0;
    rank.wait_ms /= rank_steps;
    rank.transfer_ms /= rank_steps;
    rank.caused_wait_ms /= rank_steps;
    CollectiveKindWait& out = kinds[kind];
    if (out.steps.empty()) {
      out.kind = kind;
      out.steps = steps;
      out.wait_ms.assign(steps.size(), 0.0);
      out.transfer_ms.assign(steps.size(), 0.0);
    }
    out.ranks.push_back(rank);
    RankCollectiveWait& sum = all_kinds[rank.rank];
    sum.rank = rank.rank;
    sum.ops += rank.ops;
    sum.wait_ms += rank.wait_ms;
    sum.transfer_ms += rank.transfer_ms;
    sum.arrived_last += rank.arrived_last;
    sum.caused_wait_ms += rank.caused_wait_ms;
    for (const auto& [step, times] : entry.by_step) {
      const size_t i = size_t(std::lower_bound(steps.begin(), steps.end(), step) - steps.begin());
      if (i >= steps.size() || steps[i] != step) continue;
      out.wait_ms[i] += times.first;
      out.transfer_ms[i] += times.second;
    }
  }
  // Per step: the mean over the ranks that have the step.
  std::vector<double> ranks_with_step(steps.size(), 0.0);
  for (const ProcessTrack& process : model.processes) {
    for (const StepInterval& step : process.steps) {
      const size_t i =
          size_t(std::lower_bound(steps.begin(), steps.end(), step.step) - steps.begin());
      if (i < steps.size()) ranks_with_step[i] += 1.0;
    }
  }
  CollectiveWaits result;
  for (auto& [kind, entry] : kinds) {
    entry.matched_ops = op_counts[kind].first;
    entry.unmatched_ops = op_counts[kind].second;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (ranks_with_step[i] <= 0) continue;
      entry.wait_ms[i] /= ranks_with_step[i];
      entry.transfer_ms[i] /= ranks_with_step[i];
    }
    std::sort(entry.ranks.begin(), entry.ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    result.kinds.push_back(std::move(entry));
  }
  auto total_wait = [](const CollectiveKindWait& kind) {
    double sum = 0;
    for (const auto& rank : kind.ranks) sum += rank.wait_ms;
    return sum;
  };
  std::stable_sort(result.kinds.begin(), result.kinds.end(),
                   [&](const auto& a, const auto& b) { return total_wait(a) > total_wait(b); });
  for (const auto& [rank, entry] : all_kinds) result.ranks.push_back(entry);
  return result;
}

}  // namespace moescope::analysis
