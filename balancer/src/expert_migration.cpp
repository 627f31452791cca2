#include "moescope/balancer/expert_migration.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moescope::balancer {

namespace {

struct Candidate {
  int overlap;
  int from;  // index on the target side
  int to;    // index on the current side
};

// Greedy maximum-overlap matching of `count` target items onto `count` current items: pairs with
// the largest overlap first, then whatever is left in index order. Not optimal in general, but
// on placements planned from similar loads the large overlaps are unambiguous. Returns
// match[target item] = current item.
template <typename OverlapFn>
std::vector<int> greedy_match(int count, OverlapFn&& overlap) {
  std::vector<Candidate> candidates;
  for (int from = 0; from < count; ++from) {
    for (int to = 0; to < count; ++to) {
      const int shared = overlap(from, to);
      if (shared > 0) candidates.push_back({shared, from, to});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.overlap != b.overlap) return a.overlap > b.overlap;
    if (a.from != b.from) return a.from < b.from;
    return a.to < b.to;
  });
  std::vector<int> match(static_cast<size_t>(count), -1);
  std::vector<bool> taken(static_cast<size_t>(count), false);
  for (const Candidate& candidate : candidates) {
    if (match[static_cast<size_t>(candidate.from)] >= 0 || taken[static_cast<size_t>(candidate.to)])
      continue;
    match[static_cast<size_t>(candidate.from)] = candidate.to;
    taken[static_cast<size_t>(candidate.to)] = true;
  }
  int next_free = 0;
  for (int from = 0; from < count; ++from) {
    if (match[static_cast<size_t>(from)] >= 0) continue;
    while (taken[static_cast<size_t>(next_free)]) ++next_free;
    match[static_cast<size_t>(from)] = next_free;
    taken[static_cast<size_t>(next_free)] = true;
  }
  return match;
}

void check_compatible(const ExpertPlacement& current, const ExpertPlacement& target,
                      int num_nodes) {
  auto fail = [](const std::string& message) {
    throw std::invalid_argument("expert migration: " + message);
  };
  if (current.num_layers != target.num_layers) {
    fail("current placement has " + std::to_string(current.num_layers) + " layers, target " +
         std::to_string(target.num_layers));
  }
  if (current.num_logical_experts != target.num_logical_experts) {
    fail("current placement has " + std::to_string(current.num_logical_experts) +
         " logical experts, target " + std::to_string(target.num_logical_experts));
  }
  if (current.num_gpus != target.num_gpus) {
    fail("current placement spans " + std::to_string(current.num_gpus) + " GPUs, target " +
         std::to_string(target.num_gpus));
  }
  if (num_nodes <= 0 || current.num_gpus % num_nodes != 0) {
    fail("num_nodes = " + std::to_string(num_nodes) +
         " must be positive and divide num_gpus = " + std::to_string(current.num_gpus));
  }
  for (const ExpertPlacement* placement : {&current, &target}) {
    const size_t slots =
        static_cast<size_t>(placement->num_layers) * placement->num_physical_experts;
    if (placement->num_gpus <= 0 || placement->num_physical_experts % placement->num_gpus != 0 ||
        placement->physical_to_logical.size() != slots) {
      fail(std::string(placement == &current ? "current" : "target") +
           " placement is malformed (slots not a multiple of GPUs or phy2log of the wrong size)");
    }
  }
}

// Everything about one layer that the matching needs.
struct LayerView {
  int num_gpus, num_experts, old_slots_per_gpu, new_slots_per_gpu;
  std::span<const int32_t> old_phy2log, new_phy2log;
  std::vector<uint8_t> old_holds;  // [num_gpus, num_experts]: GPU holds the expert now

  bool holds(int gpu, int expert) const {
    return old_holds[static_cast<size_t>(gpu) * num_experts + expert] != 0;
  }
  // Distinct experts of a target GPU.
  std::vector<int32_t> new_experts(int gpu) const {
    std::vector<int32_t> experts(new_phy2log.begin() + gpu * new_slots_per_gpu,
                                 new_phy2log.begin() + (gpu + 1) * new_slots_per_gpu);
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    return experts;
  }
};

// match[target GPU] = current GPU, nodes matched first, then GPUs inside matched nodes.
std::vector<int> match_gpus(const LayerView& view, int num_nodes) {
  const int gpus_per_node = view.num_gpus / num_nodes;
  std::vector<std::vector<int32_t>> new_experts(static_cast<size_t>(view.num_gpus));
  for (int gpu = 0; gpu < view.num_gpus; ++gpu)
    new_experts[static_cast<size_t>(gpu)] = view.new_experts(gpu);

  std::vector<int> node_match(1, 0);
  if (num_nodes > 1) {
    node_match = greedy_match(num_nodes, [&](int new_node, int old_node) {
      std::vector<uint8_t> seen(static_cast<size_t>(view.num_experts), 0);
      int shared = 0;
      for (int g = new_node * gpus_per_node; g < (new_node + 1) * gpus_per_node; ++g) {
        for (int32_t expert : new_experts[static_cast<size_t>(g)]) {
          if (seen[static_cast<size_t>(expert)]) continue;
          seen[static_cast<size_t>(expert)] = 1;
          for (int o = old_node * gpus_per_node; o < (old_node + 1) * gpus_per_node; ++o) {
            if (view.holds(o, expert)) {
              ++shared;
              break;
            }
          }
        }
      }
      return shared;
    });
  }
  std::vector<int> gpu_match(static_cast<size_t>(view.num_gpus), -1);
  for (int new_node = 0; new_node < num_nodes; ++new_node) {
    const int old_node = node_match[static_cast<size_t>(new_node)];
    const std::vector<int> inside = greedy_match(gpus_per_node, [&](int new_local, int old_local) {
      int shared = 0;
      for (int32_t expert :
           new_experts[static_cast<size_t>(new_node * gpus_per_node + new_local)]) {
        shared += view.holds(old_node * gpus_per_node + old_local, expert) ? 1 : 0;
      }
      return shared;
    });
    for (int local = 0; local < gpus_per_node; ++local) {
      gpu_match[static_cast<size_t>(new_node * gpus_per_node + local)] =
          old_node * gpus_per_node + inside[static_cast<size_t>(local)];
    }
  }
  return gpu_match;
}

}  // namespace

ExpertMigration plan_expert_migration(const ExpertPlacement& current, const ExpertPlacement& target,
                                      int num_nodes) {
  check_compatible(current, target, num_nodes);
  ExpertMigration migration;
  ExpertPlacement& aligned = migration.placement;
  aligned = target;
  std::fill(aligned.logical_to_physical.begin(), aligned.logical_to_physical.end(), -1);

  const int num_gpus = target.num_gpus;
  const int num_experts = target.num_logical_experts;
  const int gpus_per_node = num_gpus / num_nodes;
  std::vector<int64_t> sends_of_gpu(static_cast<size_t>(num_gpus), 0);

  for (int layer = 0; layer < target.num_layers; ++layer) {
    LayerView view{num_gpus,
                   num_experts,
                   current.slots_per_gpu(),
                   target.slots_per_gpu(),
                   current.phy2log(layer),
                   target.phy2log(layer),
                   std::vector<uint8_t>(static_cast<size_t>(num_gpus) * num_experts, 0)};
    std::vector<std::vector<int>> old_gpus_of_expert(static_cast<size_t>(num_experts));
    for (size_t slot = 0; slot < view.old_phy2log.size(); ++slot) {
      const int gpu = static_cast<int>(slot) / view.old_slots_per_gpu;
      const int32_t expert = view.old_phy2log[slot];
      uint8_t& held = view.old_holds[static_cast<size_t>(gpu) * num_experts + expert];
      if (!held) old_gpus_of_expert[static_cast<size_t>(expert)].push_back(gpu);
      held = 1;
    }
    const std::vector<int> gpu_match = match_gpus(view, num_nodes);

    int32_t* phy2log = aligned.physical_to_logical.data() +
                       static_cast<size_t>(layer) * aligned.num_physical_experts;
    const int new_slots = view.new_slots_per_gpu;
    for (int new_gpu = 0; new_gpu < num_gpus; ++new_gpu) {
      const int gpu = gpu_match[static_cast<size_t>(new_gpu)];
      // The target GPU's experts, placed first at the local index they had on this GPU.
      std::vector<int32_t> pending(view.new_phy2log.begin() + new_gpu * new_slots,
                                   view.new_phy2log.begin() + (new_gpu + 1) * new_slots);
      std::vector<int32_t> local(static_cast<size_t>(new_slots), -1);
      const int common = std::min(new_slots, view.old_slots_per_gpu);
      for (int index = 0; index < common; ++index) {
        const int32_t old_expert =
            view.old_phy2log[static_cast<size_t>(gpu * view.old_slots_per_gpu + index)];
        auto found = std::find(pending.begin(), pending.end(), old_expert);
        if (found == pending.end()) continue;
        local[static_cast<size_t>(index)] = old_expert;
        pending.erase(found);
      }
      auto next = pending.begin();
      for (int32_t& expert : local) {
        if (expert < 0) expert = *next++;
      }
      std::copy(local.begin(), local.end(), phy2log + gpu * new_slots);

      // Moves: each expert missing on this GPU is received once.
      std::vector<int32_t> distinct = local;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      for (int32_t expert : local) {
        migration.slots_already_in_place += view.holds(gpu, expert) ? 1 : 0;
      }
      for (int32_t expert : distinct) {
        if (view.holds(gpu, expert)) continue;
        int source = -1;
        for (int candidate : old_gpus_of_expert[static_cast<size_t>(expert)]) {
          if (source < 0) {
            source = candidate;
            continue;
          }
          const bool candidate_near = candidate / gpus_per_node == gpu / gpus_per_node;
          const bool source_near = source / gpus_per_node == gpu / gpus_per_node;
          if (candidate_near != source_near) {
            if (candidate_near) source = candidate;
          } else if (sends_of_gpu[static_cast<size_t>(candidate)] <
                     sends_of_gpu[static_cast<size_t>(source)]) {
            source = candidate;
          }
        }
        ++sends_of_gpu[static_cast<size_t>(source)];
        migration.moves.push_back({layer, expert, source, gpu});
      }
    }
    // Moves were generated in target-GPU order; order them by destination.
    auto layer_begin = std::find_if(migration.moves.begin(), migration.moves.end(),
                                    [&](const ExpertMove& move) { return move.layer == layer; });
    std::stable_sort(layer_begin, migration.moves.end(),
                     [](const ExpertMove& a, const ExpertMove& b) { return a.to_gpu < b.to_gpu; });

    // log2phy from the renumbered slots, replica ranks in slot order.
    std::vector<int> next_rank(static_cast<size_t>(num_experts), 0);
    int32_t* log2phy = aligned.logical_to_physical.data() +
                       static_cast<size_t>(layer) * num_experts * aligned.max_replicas;
    for (int slot = 0; slot < aligned.num_physical_experts; ++slot) {
      const int32_t expert = phy2log[slot];
      log2phy[static_cast<size_t>(expert) * aligned.max_replicas +
              static_cast<size_t>(next_rank[static_cast<size_t>(expert)]++)] = slot;
    }
  }
  return migration;
}

}  // namespace moescope::balancer
