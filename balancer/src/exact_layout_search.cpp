// Branch and bound over replica layouts. Two nested searches:
// 1. replica counts: experts heaviest first, each given between the fewest replicas that keep
//    every replica below the incumbent and as many as the free slots allow (experts of equal
//    load get non-increasing counts: swapping them gives the same layouts);
// 2. for each count vector that passes cheap lower bounds, a packing of its replicas (heaviest
//    first) onto GPUs, lightest GPU first, skipping GPUs in the same state as one already tried
//    and GPUs that could no longer be filled below the incumbent.
// Every complete packing found is strictly better than the incumbent and becomes it.
#include <algorithm>
#include <cmath>

#include "balanced_packing.h"
#include "layout_search.h"

namespace moescope::balancer {

namespace {

struct Replica {
  double weight;
  int32_t expert;
};

class ExactSearch : LayoutSearchProblem {
 public:
  ExactSearch(std::span<const double> loads, const ReplicaLayout& incumbent, int64_t node_budget)
      : LayoutSearchProblem(loads, incumbent), node_budget_(node_budget), best_layout_(incumbent) {
    const int num_slots = num_gpus_ * slots_per_gpu_;
    best_ = layout_max_gpu_load(loads, incumbent);
    lower_bound_ = layout_lower_bound(loads, num_slots, num_gpus_);
    order_ = heaviest_first(loads);
    counts_.assign(static_cast<size_t>(num_experts_), 1);
    replicas_.reserve(static_cast<size_t>(num_slots));
    smallest_sum_.resize(static_cast<size_t>(num_slots) + 1);
    prefix_sum_.resize(static_cast<size_t>(num_slots) + 1);
    gpu_of_replica_.resize(static_cast<size_t>(num_slots));
    gpu_load_.resize(static_cast<size_t>(num_gpus_));
    gpu_free_.resize(static_cast<size_t>(num_gpus_));
    mean_ = total_load_ / num_gpus_;
  }

  LayoutSearchResult run(ReplicaLayout& layout) {
    LayoutSearchResult result;
    if (!done()) choose_counts(0, num_gpus_ * slots_per_gpu_ - num_experts_);
    result.work = nodes_;
    result.proven_optimal = !out_of_budget_;
    if (improved_) {
      layout = best_layout_;
      result.improved = true;
    }
    return result;
  }

 private:
  double target() const { return best_ - tolerance_; }
  // The incumbent meets the lower bound: nothing can beat it.
  bool done() const { return best_ <= lower_bound_ + tolerance_; }
  bool stop() const { return out_of_budget_ || done(); }
  bool count_node() {
    if (++nodes_ > node_budget_) out_of_budget_ = true;
    return !out_of_budget_;
  }

  void choose_counts(int index, int free_extras) {
    if (stop() || !count_node()) return;
    if (index == num_experts_) {
      if (free_extras == 0) try_counts();
      return;
    }
    const int32_t expert = order_[static_cast<size_t>(index)];
    const double load = loads_[static_cast<size_t>(expert)];
    // Fewest replicas that keep each below the incumbent: load / c < target.
    int min_count = 1;
    if (load > 0.0) {
      const double needed = std::floor(load / target()) + 1.0;
      if (needed - 1.0 > free_extras) return;
      min_count = std::max(1, static_cast<int>(needed));
    }
    int max_count = 1 + free_extras;
    if (index > 0 && loads_[static_cast<size_t>(order_[static_cast<size_t>(index) - 1])] == load) {
      max_count = std::min(max_count, counts_[static_cast<size_t>(order_[index - 1])]);
    }
    // The last expert takes every remaining slot.
    if (index == num_experts_ - 1) min_count = std::max(min_count, max_count);
    for (int count = min_count; count <= max_count && !stop(); ++count) {
      counts_[static_cast<size_t>(expert)] = count;
      choose_counts(index + 1, free_extras - (count - 1));
    }
    counts_[static_cast<size_t>(expert)] = 1;
  }

  void try_counts() {
    replicas_.clear();
    for (int expert = 0; expert < num_experts_; ++expert) {
      const int count = counts_[static_cast<size_t>(expert)];
      const double weight = loads_[static_cast<size_t>(expert)] / count;
      for (int r = 0; r < count; ++r) replicas_.push_back({weight, expert});
    }
    std::sort(replicas_.begin(), replicas_.end(), [](const Replica& a, const Replica& b) {
      if (a.weight != b.weight) return a.weight > b.weight;
      return a.expert < b.expert;
    });
    const size_t n = replicas_.size();
    smallest_sum_[0] = 0.0;
    prefix_sum_[0] = 0.0;
    for (size_t i = 0; i < n; ++i) prefix_sum_[i + 1] = prefix_sum_[i] + replicas_[i].weight;
    for (size_t f = 1; f <= n; ++f)
      smallest_sum_[f] = smallest_sum_[f - 1] + replicas_[n - f].weight;
    // The GPU holding the largest replica also holds slots_per_gpu - 1 others; two of the
    // num_gpus + 1 largest replicas share a GPU.
    const size_t k = static_cast<size_t>(slots_per_gpu_);
    double bound = std::max(mean_, replicas_[0].weight + smallest_sum_[k - 1]);
    if (k >= 2 && n > static_cast<size_t>(num_gpus_)) {
      bound = std::max(bound, replicas_[static_cast<size_t>(num_gpus_) - 1].weight +
                                  replicas_[static_cast<size_t>(num_gpus_)].weight +
                                  smallest_sum_[k - 2]);
    }
    if (bound >= target()) return;
    std::fill(gpu_load_.begin(), gpu_load_.end(), 0.0);
    std::fill(gpu_free_.begin(), gpu_free_.end(), slots_per_gpu_);
    pack(0, 0.0);
  }

  void pack(size_t index, double max_load) {
    if (stop() || !count_node()) return;
    const size_t n = replicas_.size();
    // Zero-weight replicas (idle experts) fill the free slots anywhere.
    if (index == n || replicas_[index].weight == 0.0) {
      record(index, max_load);
      return;
    }
    // The remaining replicas must fit under the target on the GPUs that still have room; and as
    // the others stay below the target, each GPU must end at or above total - (G - 1) x target,
    // which its free slots must be able to reach with the heaviest remaining replicas.
    double room = 0.0;
    const double least_final_load = total_load_ - (num_gpus_ - 1) * target();
    for (size_t gpu = 0; gpu < gpu_load_.size(); ++gpu) {
      const int free = gpu_free_[gpu];
      if (free == 0) continue;
      room += target() - gpu_load_[gpu];
      const size_t reach = std::min(n, index + static_cast<size_t>(free));
      if (gpu_load_[gpu] + prefix_sum_[reach] - prefix_sum_[index] < least_final_load) return;
    }
    if (smallest_sum_[n - index] >= room) return;
    const double weight = replicas_[index].weight;
    // Replicas of equal weight are interchangeable: they go to GPUs in increasing index order.
    const int first_gpu =
        index > 0 && replicas_[index - 1].weight == weight ? gpu_of_replica_[index - 1] : 0;
    int gpus_by_load[kMaxGpusOnStack];
    std::vector<int> heap_order;
    int* order = gpus_by_load;
    if (num_gpus_ > kMaxGpusOnStack) {
      heap_order.resize(static_cast<size_t>(num_gpus_));
      order = heap_order.data();
    }
    int candidates = 0;
    for (int gpu = first_gpu; gpu < num_gpus_; ++gpu) {
      if (gpu_free_[static_cast<size_t>(gpu)] > 0) order[candidates++] = gpu;
    }
    std::sort(order, order + candidates, [&](int a, int b) {
      if (gpu_load_[static_cast<size_t>(a)] != gpu_load_[static_cast<size_t>(b)]) {
        return gpu_load_[static_cast<size_t>(a)] < gpu_load_[static_cast<size_t>(b)];
      }
      return a < b;
    });
    for (int i = 0; i < candidates && !stop(); ++i) {
      const size_t gpu = static_cast<size_t>(order[i]);
      const double new_load = gpu_load_[gpu] + weight;
      if (new_load >= target()) break;  // GPUs are in load order: the rest are no better
      // A GPU in the same state as one tried before leads to the same layouts.
      bool same_as_tried = false;
      for (int j = 0; j < i && !same_as_tried; ++j) {
        const size_t other = static_cast<size_t>(order[j]);
        same_as_tried = gpu_free_[other] == gpu_free_[gpu] && gpu_load_[other] == gpu_load_[gpu];
      }
      if (same_as_tried) continue;
      // Its other free slots take at least the smallest remaining replicas.
      if (new_load + smallest_sum_[static_cast<size_t>(gpu_free_[gpu] - 1)] >= target()) continue;
      gpu_of_replica_[index] = static_cast<int32_t>(gpu);
      gpu_load_[gpu] = new_load;
      --gpu_free_[gpu];
      pack(index + 1, std::max(max_load, new_load));
      ++gpu_free_[gpu];
      gpu_load_[gpu] -= weight;
    }
  }

  void record(size_t placed, double max_load) {
    best_ = max_load;
    improved_ = true;
    best_layout_.replica_count = counts_;
    for (auto& experts : best_layout_.experts_of_gpu) experts.clear();
    for (size_t i = 0; i < placed; ++i) {
      best_layout_.experts_of_gpu[static_cast<size_t>(gpu_of_replica_[i])].push_back(
          replicas_[i].expert);
    }
    size_t next = placed;
    for (auto& experts : best_layout_.experts_of_gpu) {
      while (experts.size() < static_cast<size_t>(slots_per_gpu_)) {
        experts.push_back(replicas_[next++].expert);
      }
    }
  }

  static constexpr int kMaxGpusOnStack = 64;

  int64_t node_budget_;
  int64_t nodes_ = 0;
  bool out_of_budget_ = false;
  bool improved_ = false;
  double best_ = 0.0;
  double lower_bound_ = 0.0;
  double mean_ = 0.0;
  ReplicaLayout best_layout_;
  std::vector<int32_t> order_;   // experts, heaviest first
  std::vector<int32_t> counts_;  // [num_experts], the count vector being tried
  std::vector<Replica> replicas_;
  std::vector<double> smallest_sum_;  // [f] = sum of the f lightest replicas
  std::vector<double> prefix_sum_;    // [i] = sum of the i heaviest replicas
  std::vector<int32_t> gpu_of_replica_;
  std::vector<double> gpu_load_;
  std::vector<int> gpu_free_;
};

}  // namespace

LayoutSearchResult exact_layout_search(std::span<const double> loads, ReplicaLayout& layout,
                                       int64_t node_budget) {
  if (layout.experts_of_gpu.size() <= 1) {
    // One GPU carries everything whatever the layout.
    return LayoutSearchResult{false, true, 0};
  }
  ExactSearch search(loads, layout, node_budget);
  return search.run(layout);
}

}  // namespace moescope::balancer
