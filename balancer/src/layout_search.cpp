#include "layout_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "replication.h"

namespace moescope::balancer {

namespace {

// kAuto runs the exact search on problems of at most this many slots (up to 12 experts with 4
// extra slots), with a node budget of about 3 ms; most such problems are solved in far fewer.
constexpr int kAutoExactMaxSlots = 24;
constexpr int64_t kAutoExactNodes = 50'000;
constexpr int64_t kExhaustiveExactNodes = 1'000'000'000;
// Local search budget in move evaluations per slot (about 90 ns each): 0.4 ms for 64 experts
// on 8 GPUs (80 slots), 2 ms for 256 experts on 64 GPUs (320 slots).
constexpr int64_t kAutoLocalEvaluationsPerSlot = 60;
constexpr int64_t kAutoLocalEvaluationsMin = 2'000;
constexpr int64_t kExhaustiveLocalFactor = 10;

}  // namespace

LayoutSearchProblem::LayoutSearchProblem(std::span<const double> loads, const ReplicaLayout& start)
    : loads_(loads),
      num_experts_(static_cast<int>(loads.size())),
      num_gpus_(static_cast<int>(start.experts_of_gpu.size())),
      slots_per_gpu_(static_cast<int>(start.experts_of_gpu[0].size())),
      total_load_(std::accumulate(loads.begin(), loads.end(), 0.0)),
      tolerance_(1e-9 * total_load_ / num_gpus_) {}

std::vector<double> layout_gpu_loads(std::span<const double> loads, const ReplicaLayout& layout) {
  std::vector<double> gpu_loads;
  gpu_loads.reserve(layout.experts_of_gpu.size());
  for (const auto& experts : layout.experts_of_gpu) {
    double load = 0.0;
    for (int32_t expert : experts) {
      load +=
          loads[static_cast<size_t>(expert)] / layout.replica_count[static_cast<size_t>(expert)];
    }
    gpu_loads.push_back(load);
  }
  return gpu_loads;
}

double layout_max_gpu_load(std::span<const double> loads, const ReplicaLayout& layout) {
  const std::vector<double> gpu_loads = layout_gpu_loads(loads, layout);
  return *std::max_element(gpu_loads.begin(), gpu_loads.end());
}

double layout_lower_bound(std::span<const double> loads, int num_slots, int num_gpus) {
  const double total = std::accumulate(loads.begin(), loads.end(), 0.0);
  double largest_replica = 0.0;
  // The greedy replication minimises the largest replica over all count vectors.
  const Replication replication = replicate_experts(loads, num_slots);
  for (size_t expert = 0; expert < loads.size(); ++expert) {
    largest_replica = std::max(largest_replica, loads[expert] / replication.replica_count[expert]);
  }
  return std::max(total / num_gpus, largest_replica);
}

LayoutSearchResult improve_layout(std::span<const double> loads, ReplicaLayout& layout,
                                  const LayoutSearchSettings& settings) {
  LayoutSearchResult result;
  if (settings.search == PlacementSearch::kNone || layout.experts_of_gpu.size() <= 1) {
    result.proven_optimal = layout.experts_of_gpu.size() <= 1;
    return result;
  }
  const int num_gpus = static_cast<int>(layout.experts_of_gpu.size());
  const int num_slots = num_gpus * static_cast<int>(layout.experts_of_gpu[0].size());
  const double lower_bound = layout_lower_bound(loads, num_slots, num_gpus);
  const double tolerance = 1e-9 * lower_bound;
  if (layout_max_gpu_load(loads, layout) <= lower_bound + tolerance) {
    result.proven_optimal = true;
    return result;
  }
  const bool exhaustive = settings.search == PlacementSearch::kExhaustive;
  if (settings.allow_exact && (exhaustive || num_slots <= kAutoExactMaxSlots)) {
    const auto nodes = static_cast<int64_t>(
        static_cast<double>(exhaustive ? kExhaustiveExactNodes : kAutoExactNodes) *
        settings.budget_share);
    const LayoutSearchResult exact =
        exact_layout_search(loads, layout, std::max<int64_t>(nodes, 1));
    result.work += exact.work;
    result.improved = exact.improved;
    if (exact.proven_optimal) {
      result.proven_optimal = true;
      return result;
    }
  }
  LocalSearchOptions options;
  const int64_t layer_budget =
      std::max(kAutoLocalEvaluationsMin,
               kAutoLocalEvaluationsPerSlot *
                   static_cast<int64_t>(std::lround(num_slots / settings.budget_share))) *
      (exhaustive ? kExhaustiveLocalFactor : 1);
  options.evaluation_budget = std::max<int64_t>(
      1, static_cast<int64_t>(static_cast<double>(layer_budget) * settings.budget_share));
  options.seed = settings.seed;
  options.stop_at_max_load = std::max(lower_bound + tolerance, settings.stop_at_max_load);
  const LayoutSearchResult local = local_layout_search(loads, layout, options);
  result.work += local.work;
  result.improved = result.improved || local.improved;
  result.proven_optimal = layout_max_gpu_load(loads, layout) <= lower_bound + tolerance;
  return result;
}

}  // namespace moescope::balancer
