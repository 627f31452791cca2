#include "balanced_packing.h"

#include <algorithm>
#include <numeric>
#include <queue>

namespace moescope::balancer {

namespace {

// The fresh plan's refinement stops once the heaviest pack is within this of the mean.
constexpr double kGoodEnoughMaxOverMean = 1.001;

struct PackState {
  double weight;
  int32_t pack;
};

// Min-heap order for std::priority_queue: lightest pack on top, ties to the lower index.
struct HeavierPack {
  bool operator()(const PackState& a, const PackState& b) const {
    if (a.weight != b.weight) return a.weight > b.weight;
    return a.pack > b.pack;
  }
};

// Greedy: the items not yet placed, in `order`, each into the lightest pack that has room.
// O(n log p) with a min-heap of the packs that have room.
void greedy_fill(std::span<const double> weights, std::span<const int32_t> order,
                 const std::vector<bool>& placed, size_t items_per_pack,
                 std::vector<std::vector<int32_t>>& items_of_pack,
                 std::vector<double>& pack_weight) {
  std::vector<PackState> open;
  for (size_t pack = 0; pack < items_of_pack.size(); ++pack) {
    if (items_of_pack[pack].size() < items_per_pack) {
      open.push_back({pack_weight[pack], static_cast<int32_t>(pack)});
    }
  }
  std::priority_queue<PackState, std::vector<PackState>, HeavierPack> open_packs(HeavierPack{},
                                                                                 std::move(open));
  for (int32_t item : order) {
    if (placed[static_cast<size_t>(item)]) continue;
    // A full pack is never pushed back, so the top is the lightest pack that has room.
    PackState lightest = open_packs.top();
    open_packs.pop();
    auto& items = items_of_pack[static_cast<size_t>(lightest.pack)];
    items.push_back(item);
    lightest.weight += weights[static_cast<size_t>(item)];
    pack_weight[static_cast<size_t>(lightest.pack)] = lightest.weight;
    if (items.size() < items_per_pack) open_packs.push(lightest);
  }
}

// Local search after the greedy: the greedy can leave the heaviest pack with a large item that a
// same-count swap with a lighter pack would shave off. Each accepted swap strictly lowers the
// heaviest pack and leaves its partner below the old maximum, so the sorted vector of pack
// weights decreases lexicographically and the loop ends; the cap bounds the time anyway.
void refine_by_swaps(std::span<const double> weights, std::vector<std::vector<int32_t>>& items,
                     std::vector<double>& pack_weight, double stop_at_weight) {
  const size_t num_packs = pack_weight.size();
  if (num_packs < 2) return;
  const double total = std::accumulate(pack_weight.begin(), pack_weight.end(), 0.0);
  // Below this an "improvement" is rounding noise.
  const double min_gain = 1e-12 * std::max(total, 1e-300);
  const size_t max_swaps = 4 * weights.size() + 16;

  auto lighter = [&](size_t a, size_t b) {
    if (pack_weight[a] != pack_weight[b]) return pack_weight[a] < pack_weight[b];
    return a < b;
  };
  // Packs by weight; after a swap only its two packs are re-sorted into place.
  std::vector<size_t> lightest_first(num_packs);
  std::iota(lightest_first.begin(), lightest_first.end(), size_t{0});
  std::sort(lightest_first.begin(), lightest_first.end(), lighter);
  // Takes the two packs of a swap out of the order and puts them back where they now belong
  // (both out first: lower_bound needs the rest to be sorted).
  auto reposition = [&](size_t first, size_t second) {
    std::erase_if(lightest_first, [&](size_t pack) { return pack == first || pack == second; });
    for (size_t pack : {first, second}) {
      lightest_first.insert(
          std::lower_bound(lightest_first.begin(), lightest_first.end(), pack, lighter), pack);
    }
  };
  for (size_t swap = 0; swap < max_swaps; ++swap) {
    const size_t heaviest = lightest_first.back();
    const double top = pack_weight[heaviest];
    if (top <= stop_at_weight) return;
    double best_pair_max = top - min_gain;
    size_t best_pack = num_packs, best_from = 0, best_to = 0;

    for (size_t other : lightest_first) {
      // No swap with `other` can beat an even split of the pair, and that bound only grows
      // along lightest_first: once it cannot beat the best swap found, stop looking.
      if ((top + pack_weight[other]) / 2 >= best_pair_max || other == heaviest) break;
      const double gap = top - pack_weight[other];
      // Moving weight d from the heaviest pack to `other` gives a pair maximum of
      // max(top - d, other + d); only 0 < d < gap helps, d = gap / 2 is ideal.
      const auto& heavy_items = items[heaviest];
      const auto& light_items = items[other];
      for (size_t i = 0; i < heavy_items.size(); ++i) {
        const double heavy_weight = weights[static_cast<size_t>(heavy_items[i])];
        for (size_t j = 0; j < light_items.size(); ++j) {
          const double d = heavy_weight - weights[static_cast<size_t>(light_items[j])];
          if (d <= 0.0 || d >= gap) continue;
          const double pair_max = std::max(top - d, pack_weight[other] + d);
          if (pair_max < best_pair_max) {
            best_pair_max = pair_max;
            best_pack = other;
            best_from = i;
            best_to = j;
          }
        }
      }
    }
    if (best_pack == num_packs) return;

    int32_t& heavy_item = items[heaviest][best_from];
    int32_t& light_item = items[best_pack][best_to];
    const double d =
        weights[static_cast<size_t>(heavy_item)] - weights[static_cast<size_t>(light_item)];
    std::swap(heavy_item, light_item);
    pack_weight[heaviest] -= d;
    pack_weight[best_pack] += d;
    reposition(heaviest, best_pack);
  }
}

PackAssignment to_assignment(const std::vector<std::vector<int32_t>>& items_of_pack,
                             size_t num_items) {
  PackAssignment result;
  result.pack_of_item.resize(num_items);
  result.rank_in_pack.resize(num_items);
  for (size_t pack = 0; pack < items_of_pack.size(); ++pack) {
    const auto& items = items_of_pack[pack];
    for (size_t rank = 0; rank < items.size(); ++rank) {
      result.pack_of_item[static_cast<size_t>(items[rank])] = static_cast<int32_t>(pack);
      result.rank_in_pack[static_cast<size_t>(items[rank])] = static_cast<int32_t>(rank);
    }
  }
  return result;
}

}  // namespace

std::vector<int32_t> heaviest_first(std::span<const double> weights) {
  std::vector<int32_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    if (weights[static_cast<size_t>(a)] != weights[static_cast<size_t>(b)]) {
      return weights[static_cast<size_t>(a)] > weights[static_cast<size_t>(b)];
    }
    return a < b;
  });
  return order;
}

PackAssignment balanced_packing(std::span<const double> weights, int num_packs, bool refine) {
  const size_t items_per_pack = weights.size() / static_cast<size_t>(num_packs);
  std::vector<std::vector<int32_t>> items_of_pack(static_cast<size_t>(num_packs));
  std::vector<double> pack_weight(static_cast<size_t>(num_packs), 0.0);
  greedy_fill(weights, heaviest_first(weights), std::vector<bool>(weights.size(), false),
              items_per_pack, items_of_pack, pack_weight);
  if (refine) {
    // Below 0.1% over the mean the swaps only chase noise in the loads; stopping there keeps
    // planning cheap.
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    refine_by_swaps(weights, items_of_pack, pack_weight,
                    total / num_packs * kGoodEnoughMaxOverMean);
  }
  return to_assignment(items_of_pack, weights.size());
}

PackAssignment sticky_balanced_packing(std::span<const double> weights, int num_packs,
                                       std::span<const int32_t> preferred_pack,
                                       double stop_max_over_mean) {
  const size_t items_per_pack = weights.size() / static_cast<size_t>(num_packs);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const double target = total / num_packs * stop_max_over_mean;
  std::vector<std::vector<int32_t>> items_of_pack(static_cast<size_t>(num_packs));
  std::vector<double> pack_weight(static_cast<size_t>(num_packs), 0.0);
  std::vector<bool> placed(weights.size(), false);
  const std::vector<int32_t> order = heaviest_first(weights);
  // Heaviest first, items stay in their preferred pack while it has room and stays under the
  // target; what does not fit is what moves.
  for (int32_t item : order) {
    const int32_t pack = preferred_pack[static_cast<size_t>(item)];
    if (pack < 0) continue;
    auto& items = items_of_pack[static_cast<size_t>(pack)];
    const double weight = weights[static_cast<size_t>(item)];
    if (items.size() == items_per_pack ||
        pack_weight[static_cast<size_t>(pack)] + weight > target) {
      continue;
    }
    items.push_back(item);
    pack_weight[static_cast<size_t>(pack)] += weight;
    placed[static_cast<size_t>(item)] = true;
  }
  greedy_fill(weights, order, placed, items_per_pack, items_of_pack, pack_weight);
  refine_by_swaps(weights, items_of_pack, pack_weight, target);
  return to_assignment(items_of_pack, weights.size());
}

}  // namespace moescope::balancer
