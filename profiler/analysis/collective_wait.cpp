// Wait vs transfer per collective, from ops matched across ranks (see collective_wait.h).
#include "moescope/analysis/collective_wait.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "moescope/analysis/collective_op_wait.h"
#include "moescope/analysis/step_detection.h"

namespace moescope::analysis {
namespace {

// One rank's copy of a collective op.
struct RankOp {
  size_t process = 0;
  const CommOp* op = nullptr;
  int64_t step = -1;  // the rank's step the op starts in; -1 outside every step
  bool in_step = false;
  size_t communicator = 0, index = 0;  // where the op is in the process
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

namespace {

// Each collective op with the copies of it the ranks ran: (comm_id, key) -> the op on each rank;
// and which processes have each communicator.
struct OpGroups {
  std::map<std::pair<uint64_t, uint64_t>, std::vector<RankOp>> groups;
  std::map<uint64_t, std::set<size_t>> members;
};

OpGroups group_ops(const TraceModel& model) {
  OpGroups out;
  for (size_t p = 0; p < model.processes.size(); ++p) {
    const ProcessTrack& process = model.processes[p];
    for (size_t c = 0; c < process.communicators.size(); ++c) {
      const CommunicatorTrack& comm = process.communicators[c];
      out.members[comm.comm_id].insert(p);
      const bool by_sequence = sequences_are_distinct(comm);
      for (size_t i = 0; i < comm.ops.size(); ++i) {
        const CommOp& op = comm.ops[i];
        const int at = step_at(process, op.start);
        RankOp entry{
            p, &op, at >= 0 ? process.steps[size_t(at)].step : -1, at >= 0 || process.steps.empty(),
            c, i};
        out.groups[{comm.comm_id, by_sequence ? uint64_t(op.sequence) : uint64_t(i)}].push_back(
            entry);
      }
    }
  }
  return out;
}

// Whether every rank of the communicator ran the op, alike and completed (see the header).
bool is_matched(const std::vector<RankOp>& ops, size_t expected) {
  bool matched = expected >= 2 && ops.size() == expected;
  for (const RankOp& entry : ops) {
    matched = matched && entry.op->kind == ops.front().op->kind && entry.step == ops.front().step &&
              !(entry.op->flags & kCommEndUnknown) && entry.op->end >= entry.op->start;
  }
  return matched;
}

// The copy that entered last.
size_t last_to_enter(const std::vector<RankOp>& ops) {
  size_t last = 0;
  for (size_t i = 1; i < ops.size(); ++i) {
    if (ops[i].op->start > ops[last].op->start) last = i;
  }
  return last;
}

TimeNs wait_of(const RankOp& entry, TimeNs last_entry) {
  return std::clamp<TimeNs>(last_entry - entry.op->start, 0, entry.op->duration());
}

}  // namespace

CollectiveOpWaits collective_op_waits(const TraceModel& model) {
  CollectiveOpWaits waits;
  waits.wait_ns.resize(model.processes.size());
  for (size_t p = 0; p < model.processes.size(); ++p) {
    for (const CommunicatorTrack& comm : model.processes[p].communicators) {
      waits.wait_ns[p].emplace_back(comm.ops.size(), TimeNs(-1));
    }
  }
  const OpGroups grouped = group_ops(model);
  for (const auto& [key, ops] : grouped.groups) {
    if (!is_matched(ops, grouped.members.at(key.first).size())) continue;
    const TimeNs last_entry = ops[last_to_enter(ops)].op->start;
    for (const RankOp& entry : ops) {
      waits.wait_ns[entry.process][entry.communicator][entry.index] = wait_of(entry, last_entry);
    }
  }
  return waits;
}

TimeNs CollectiveOpWaits::wait(size_t process, size_t communicator, size_t op) const {
  if (process >= wait_ns.size() || communicator >= wait_ns[process].size() ||
      op >= wait_ns[process][communicator].size()) {
    return -1;
  }
  return wait_ns[process][communicator][op];
}

CollectiveWaits analyze_collective_waits(const TraceModel& model) {
  const OpGroups grouped = group_ops(model);
  const auto& groups = grouped.groups;

  // (kind, process) -> totals; kind -> matched / unmatched op counts.
  std::map<std::pair<uint32_t, size_t>, RankTotals> per_rank;
  std::map<uint32_t, std::pair<uint32_t, uint32_t>> op_counts;
  for (const auto& [key, ops] : groups) {
    const bool matched = is_matched(ops, grouped.members.at(key.first).size());
    const uint32_t kind = ops.front().op->kind;
    if (!matched) {
      op_counts[kind].second += uint32_t(ops.size());
      continue;
    }
    ++op_counts[kind].first;
    const size_t last = last_to_enter(ops);
    const TimeNs last_entry = ops[last].op->start;
    double others_wait_ms = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = *ops[i].op;
      const TimeNs wait = wait_of(ops[i], last_entry);
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
