#include "replication.h"

#include <queue>
#include <utility>

namespace moescope::balancer {

namespace {

// Heap entry: an expert and its load per replica if it keeps its current replica count.
struct ReplicaCandidate {
  double load_per_replica;
  int32_t expert;
};

// std::priority_queue keeps the "largest" on top: highest load per replica, then lowest index,
// which is the argmax EPLB takes.
struct LowerPriority {
  bool operator()(const ReplicaCandidate& a, const ReplicaCandidate& b) const {
    if (a.load_per_replica != b.load_per_replica) return a.load_per_replica < b.load_per_replica;
    return a.expert > b.expert;
  }
};

}  // namespace

Replication replicate_experts(std::span<const double> loads, int num_physical) {
  const int num_logical = static_cast<int>(loads.size());
  Replication result;
  result.physical_to_logical.resize(static_cast<size_t>(num_physical));
  result.replica_rank.assign(static_cast<size_t>(num_physical), 0);
  result.replica_count.assign(static_cast<size_t>(num_logical), 1);

  std::vector<ReplicaCandidate> initial;
  initial.reserve(static_cast<size_t>(num_logical));
  for (int expert = 0; expert < num_logical; ++expert) {
    result.physical_to_logical[static_cast<size_t>(expert)] = expert;
    initial.push_back({loads[static_cast<size_t>(expert)], expert});
  }
  std::priority_queue<ReplicaCandidate, std::vector<ReplicaCandidate>, LowerPriority> heap(
      LowerPriority{}, std::move(initial));

  for (int slot = num_logical; slot < num_physical; ++slot) {
    const int32_t expert = heap.top().expert;
    heap.pop();
    int32_t& count = result.replica_count[static_cast<size_t>(expert)];
    result.physical_to_logical[static_cast<size_t>(slot)] = expert;
    result.replica_rank[static_cast<size_t>(slot)] = count;
    ++count;
    heap.push({loads[static_cast<size_t>(expert)] / count, expert});
  }
  return result;
}

}  // namespace moescope::balancer
