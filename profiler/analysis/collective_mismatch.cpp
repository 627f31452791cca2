// Which collective a hung job waits in (collective_mismatch.h).
#include "moescope/analysis/collective_mismatch.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <utility>

namespace moescope::analysis {

std::string rank_runs(std::vector<int32_t> ranks, size_t max_runs) {
  std::sort(ranks.begin(), ranks.end());
  std::string text;
  size_t runs = 0, i = 0;
  for (; i < ranks.size() && runs < max_runs; ++runs) {
    size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    text += (runs ? ", " : "") + std::to_string(ranks[i]);
    if (last > i) text += "-" + std::to_string(ranks[last]);
    i = last + 1;
  }
  if (i < ranks.size()) text += ", +" + std::to_string(ranks.size() - i) + " more";
  return text;
}

std::vector<CollectiveMismatch> collective_mismatches(const std::vector<RankCollectives>& ranks) {
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> latest;  // comm -> (sequence, kind)
  std::map<uint64_t, int32_t> comm_size;
  for (const auto& rank : ranks) {
    for (const auto& state : rank.collectives) {
      comm_size[state.comm_id] = std::max(comm_size[state.comm_id], state.num_ranks);
      if (!state.has_open) continue;
      auto [entry, inserted] =
          latest.try_emplace(state.comm_id, state.open_sequence, state.open_kind);
      if (!inserted && state.open_sequence > entry->second.first) {
        entry->second = {state.open_sequence, state.open_kind};
      }
    }
  }
  std::vector<CollectiveMismatch> mismatches;
  for (const auto& [comm_id, latest_op] : latest) {
    CollectiveMismatch mismatch;
    mismatch.comm_id = comm_id;
    mismatch.sequence = latest_op.first;
    mismatch.kind = latest_op.second;
    std::set<int32_t> seen;
    for (const auto& rank : ranks) {
      for (const auto& state : rank.collectives) {
        if (state.comm_id != comm_id) continue;
        seen.insert(rank.rank);
        const bool inside = state.has_open && state.open_sequence >= mismatch.sequence;
        const bool past = state.has_completed && state.completed_sequence >= mismatch.sequence;
        if (inside) {
          mismatch.waiting.push_back(rank.rank);
        } else if (!past) {
          mismatch.never_entered.push_back(rank.rank);
        }
      }
    }
    // Ranks that show nothing of this communicator at all: members that never reached it when
    // it spans every rank given. A subgroup's (an expert-parallel group of 8 among 1,024 ranks)
    // members are not known from here: the others are not called missing.
    if (comm_size[comm_id] == static_cast<int32_t>(ranks.size())) {
      for (const auto& rank : ranks) {
        if (!seen.count(rank.rank)) mismatch.never_entered.push_back(rank.rank);
      }
    }
    if (!mismatch.never_entered.empty() || !mismatch.waiting.empty()) {
      mismatches.push_back(std::move(mismatch));
    }
  }
  return mismatches;
}

std::vector<CollectiveState> collectives_at_end(const ProcessTrack& process, TimeNs end) {
  std::map<uint64_t, CollectiveState> by_comm;
  for (const auto& comm : process.communicators) {
    // Completed: an op with a known end. One written with none may have been on the GPU still
    // when the recording stopped (the NCCL completion tracker writes those so).
    const CommOp* last = nullptr;
    for (const auto& op : comm.ops) {
      if (!(op.flags & kCommEndUnknown) && (!last || op.sequence >= last->sequence)) last = &op;
    }
    if (!last) continue;
    CollectiveState& state = by_comm[comm.comm_id];
    state.comm_id = comm.comm_id;
    state.num_ranks = comm.num_ranks;
    state.has_completed = true;
    state.completed_sequence = last->sequence;
    state.completed_kind = last->kind;
    state.completed_bytes = last->bytes;
  }
  TimeNs last_step = INT64_MIN;
  for (const auto& marker : process.step_markers) last_step = std::max(last_step, marker.time);
  for (const auto& open : process.collectives_open) {  // sorted by time: the latest wins
    // Stepping on after entering it: the collective's end went unreported, it is no hang.
    if (open.time <= last_step) continue;
    CollectiveState& state = by_comm[open.comm_id];
    if (state.has_completed && state.completed_sequence >= open.sequence) continue;  // it ended
    state.comm_id = open.comm_id;
    state.num_ranks = std::max(state.num_ranks, open.num_ranks);
    state.has_open = true;
    state.open_sequence = open.sequence;
    state.open_kind = open.kind;
    state.open_bytes = open.bytes;
    state.open_entered = open.time;
    state.open_for_s = end > open.time ? (end - open.time) * 1e-9 : 0.0;
  }
  std::vector<CollectiveState> states;
  for (auto& [comm_id, state] : by_comm) states.push_back(state);
  return states;
}

TimeNs recording_end(const ProcessTrack& process) {
  return std::max(process.end, process.recorder_running_until);
}

}  // namespace moescope::analysis
