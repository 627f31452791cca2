// Search for a better replica layout than the greedy one: which experts get the extra replicas
// and which GPU holds each replica, decided together. One problem is a layer (global policy) or
// one node's share of it (hierarchical policy): experts with loads, num_gpus GPUs of
// slots_per_gpu slots each. The objective is the largest per-GPU load.
//
// Two searches, both starting from a given layout and returning it unchanged unless they find a
// strictly better one (so they are never worse than their start):
// - exact_layout_search: branch and bound over replica counts and, for each, over packings.
//   Proves optimality when it finishes within its node budget; for small problems.
// - local_layout_search: steepest descent over swaps of replicas between GPUs and "re-replication"
//   moves (one replica slot changes expert), with seeded random kicks out of local optima, for
//   a bounded number of move evaluations; for problems of any size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {

/// Replicas laid out on GPUs. experts_of_gpu[g] lists the expert in each slot of GPU g (an expert
/// may appear more than once on one GPU); every GPU has the same number of slots.
struct ReplicaLayout {
  std::vector<int32_t> replica_count;                // [num_experts], >= 1
  std::vector<std::vector<int32_t>> experts_of_gpu;  // [num_gpus][slots_per_gpu]
};

/// Per-GPU load of a layout: [num_gpus]. A replica of expert e carries loads[e] / replica_count[e].
std::vector<double> layout_gpu_loads(std::span<const double> loads, const ReplicaLayout& layout);

double layout_max_gpu_load(std::span<const double> loads, const ReplicaLayout& layout);

/// A lower bound on the largest GPU load of any layout of num_slots slots on num_gpus GPUs: the
/// mean GPU load, and the smallest possible largest replica (the greedy replication's).
double layout_lower_bound(std::span<const double> loads, int num_slots, int num_gpus);

/// What both searches know of their problem, read off the loads and the starting layout. The
/// searches derive from it.
class LayoutSearchProblem {
 protected:
  LayoutSearchProblem(std::span<const double> loads, const ReplicaLayout& start);

  std::span<const double> loads_;
  int num_experts_;
  int num_gpus_;
  int slots_per_gpu_;
  double total_load_;
  double tolerance_;  // gains below this are rounding, not a better layout
};

struct LayoutSearchResult {
  bool improved = false;        // layout was replaced by a strictly better one
  bool proven_optimal = false;  // no layout has a lower maximum (exact search finished)
  int64_t work = 0;             // nodes (exact) or move evaluations (local) spent
};

/// Branch and bound. `layout` is the incumbent on entry and the best layout found on return.
/// Stops after node_budget search nodes; proven_optimal is then false.
LayoutSearchResult exact_layout_search(std::span<const double> loads, ReplicaLayout& layout,
                                       int64_t node_budget);

struct LocalSearchOptions {
  int64_t evaluation_budget = 0;  // candidate moves evaluated, over all descents and kicks
  uint64_t seed = 0;              // random kicks; the same seed gives the same layout
  /// Stop as soon as the largest GPU load is at or below this (e.g. a lower bound, or the
  /// incremental planner's max/mean bound times the mean).
  double stop_at_max_load = 0.0;
};

/// Local search from `layout` (replaced by the best layout visited).
LayoutSearchResult local_layout_search(std::span<const double> loads, ReplicaLayout& layout,
                                       const LocalSearchOptions& options);

struct LayoutSearchSettings {
  PlacementSearch search = PlacementSearch::kAuto;
  uint64_t seed = 0;
  /// Stop once the largest GPU load is at or below this (0: only at the lower bound).
  double stop_at_max_load = 0.0;
  /// Branch and bound may run (off for incremental plans, where it would move everything).
  bool allow_exact = true;
  /// This problem's share of the layer's search budget (1 / nodes for a node of a layer).
  double budget_share = 1.0;
};

/// The planner's search on one problem, as PlacementSearch describes: exact search where the
/// problem is small (or always, for kExhaustive), then local search unless the exact search
/// proved its result optimal. `layout` is the start and receives the result.
LayoutSearchResult improve_layout(std::span<const double> loads, ReplicaLayout& layout,
                                  const LayoutSearchSettings& settings);

}  // namespace moescope::balancer
