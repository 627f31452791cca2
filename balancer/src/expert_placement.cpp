#include "moescope/balancer/expert_placement.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "balanced_packing.h"
#include "layout_search.h"
#include "replication.h"

namespace moescope::balancer {

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw std::invalid_argument("expert placement: " + message);
}

void validate(const ExpertLoads& loads, const PlacementConfig& config) {
  if (loads.num_layers <= 0 || loads.num_experts <= 0) {
    fail("the loads are empty (" + std::to_string(loads.num_layers) + " layers x " +
         std::to_string(loads.num_experts) + " experts)");
  }
  const size_t expected = static_cast<size_t>(loads.num_layers) * loads.num_experts;
  if (loads.values.size() != expected) {
    fail("loads.values has " + std::to_string(loads.values.size()) + " entries, expected " +
         std::to_string(expected) + " (num_layers x num_experts)");
  }
  for (size_t i = 0; i < loads.values.size(); ++i) {
    const double value = loads.values[i];
    if (!std::isfinite(value) || value < 0.0) {
      fail("load of layer " + std::to_string(i / loads.num_experts) + " expert " +
           std::to_string(i % loads.num_experts) + " is " + std::to_string(value) +
           "; loads must be finite and non-negative");
    }
  }
  if (config.num_gpus <= 0)
    fail("num_gpus must be positive, got " + std::to_string(config.num_gpus));
  if (config.num_nodes <= 0) {
    fail("num_nodes must be positive, got " + std::to_string(config.num_nodes));
  }
  if (config.num_groups <= 0) {
    fail("num_groups must be positive, got " + std::to_string(config.num_groups));
  }
  if (config.num_physical_experts <= 0) {
    fail("num_physical_experts (slots) must be positive, got " +
         std::to_string(config.num_physical_experts));
  }
  if (config.num_physical_experts % config.num_gpus != 0) {
    fail("num_physical_experts (slots) = " + std::to_string(config.num_physical_experts) +
         " must be a multiple of num_gpus = " + std::to_string(config.num_gpus));
  }
  if (config.num_gpus % config.num_nodes != 0) {
    fail("num_gpus = " + std::to_string(config.num_gpus) +
         " must be a multiple of num_nodes = " + std::to_string(config.num_nodes));
  }
  if (loads.num_experts % config.num_groups != 0) {
    fail("the number of logical experts (" + std::to_string(loads.num_experts) +
         ") must be a multiple of num_groups = " + std::to_string(config.num_groups));
  }
  if (config.num_physical_experts < loads.num_experts) {
    fail("num_physical_experts (slots) = " + std::to_string(config.num_physical_experts) +
         " is less than the number of logical experts (" + std::to_string(loads.num_experts) +
         "); every expert needs a slot");
  }
  if (config.policy == PlacementPolicy::kHierarchical &&
      config.num_groups % config.num_nodes != 0) {
    fail("the hierarchical policy needs num_groups (" + std::to_string(config.num_groups) +
         ") to be a multiple of num_nodes (" + std::to_string(config.num_nodes) + ")");
  }
}

// The shape of one hierarchical planning problem; the global policy is groups = nodes = 1.
struct Hierarchy {
  int num_logical;
  int num_physical;
  int num_groups;
  int num_nodes;
  int num_gpus;
  bool refine;
  PlacementSearch search;  // kNone unless refine
  uint64_t search_seed;
};

// Where the running placement holds one layer's experts, for incremental planning.
struct CurrentLayout {
  std::vector<std::vector<int32_t>> gpus_of_expert;  // [logical] -> GPUs, one entry per replica
  double max_over_mean;                              // how far stickiness may unbalance a pack
};

CurrentLayout current_layout(const ExpertPlacement& current, int layer, double max_over_mean) {
  CurrentLayout layout{
      std::vector<std::vector<int32_t>>(static_cast<size_t>(current.num_logical_experts)),
      max_over_mean};
  const auto phy2log = current.phy2log(layer);
  const int slots_per_gpu = current.slots_per_gpu();
  for (size_t slot = 0; slot < phy2log.size(); ++slot) {
    layout.gpus_of_expert[static_cast<size_t>(phy2log[slot])].push_back(static_cast<int32_t>(slot) /
                                                                        slots_per_gpu);
  }
  return layout;
}

// A replication with the given replica counts: [logical] -> count (each >= 1).
Replication replication_with_counts(const std::vector<int32_t>& counts) {
  Replication replication;
  replication.replica_count = counts;
  for (size_t expert = 0; expert < counts.size(); ++expert) {
    for (int32_t rank = 0; rank < counts[expert]; ++rank) {
      replication.physical_to_logical.push_back(static_cast<int32_t>(expert));
      replication.replica_rank.push_back(rank);
    }
  }
  return replication;
}

// Step 3 of a node: its replicas (node-local expert ids) packed onto its GPUs, balanced packing
// for a fresh plan; with `current`, replica r of an expert prefers the r-th GPU of this node
// that holds the expert now.
ReplicaLayout replicas_on_node_gpus(std::span<const double> node_loads,
                                    const Replication& replication, int gpus_per_node, int node,
                                    const int32_t* local_to_logical, const CurrentLayout* current,
                                    bool refine) {
  const size_t num_replicas = replication.physical_to_logical.size();
  std::vector<double> replica_loads(num_replicas);
  for (size_t i = 0; i < num_replicas; ++i) {
    const int32_t k = replication.physical_to_logical[i];
    replica_loads[i] =
        node_loads[static_cast<size_t>(k)] / replication.replica_count[static_cast<size_t>(k)];
  }
  PackAssignment gpu_of_replica;
  if (current == nullptr) {
    gpu_of_replica = balanced_packing(replica_loads, gpus_per_node, refine);
  } else {
    std::vector<int32_t> preferred_gpu(num_replicas, -1);
    for (size_t i = 0; i < num_replicas; ++i) {
      const int32_t expert = local_to_logical[replication.physical_to_logical[i]];
      int rank = replication.replica_rank[i];
      for (int32_t gpu : current->gpus_of_expert[static_cast<size_t>(expert)]) {
        if (gpu / gpus_per_node != node) continue;
        if (rank-- == 0) {
          preferred_gpu[i] = gpu % gpus_per_node;
          break;
        }
      }
    }
    gpu_of_replica = sticky_balanced_packing(replica_loads, gpus_per_node, preferred_gpu,
                                             current->max_over_mean);
  }
  ReplicaLayout layout{
      replication.replica_count,
      std::vector<std::vector<int32_t>>(
          static_cast<size_t>(gpus_per_node),
          std::vector<int32_t>(num_replicas / static_cast<size_t>(gpus_per_node)))};
  for (size_t i = 0; i < num_replicas; ++i) {
    layout.experts_of_gpu[static_cast<size_t>(gpu_of_replica.pack_of_item[i])]
                         [static_cast<size_t>(gpu_of_replica.rank_in_pack[i])] =
        replication.physical_to_logical[i];
  }
  return layout;
}

// A distinct, reproducible seed for each layer and node from the configured one (splitmix64).
uint64_t search_seed_of(uint64_t seed, int layer, int node) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(layer) * 65537u +
                                               static_cast<uint64_t>(node) + 1u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Plans one layer. Writes phy2log and the replica rank of each slot, and logcnt. With `current`
// the packings prefer to leave groups on their node and replicas on their GPU. Returns the
// search's outcome over the nodes (proven optimal only if every node's plan is).
LayoutSearchResult plan_layer(std::span<const double> loads, const Hierarchy& h, int layer,
                              const CurrentLayout* current, std::span<int32_t> phy2log,
                              std::span<int32_t> replica_rank_of_slot, std::span<int32_t> logcnt) {
  LayoutSearchResult outcome{false, true, 0};
  const int group_size = h.num_logical / h.num_groups;
  const int logical_per_node = h.num_logical / h.num_nodes;
  const int physical_per_node = h.num_physical / h.num_nodes;
  const int gpus_per_node = h.num_gpus / h.num_nodes;
  const int slots_per_gpu = h.num_physical / h.num_gpus;

  // Step 1: groups onto nodes. "Node-local" expert ids (node-major, group by group) map back to
  // logical ids through node_local_to_logical.
  std::vector<double> group_load(static_cast<size_t>(h.num_groups), 0.0);
  for (int expert = 0; expert < h.num_logical; ++expert) {
    group_load[static_cast<size_t>(expert / group_size)] += loads[static_cast<size_t>(expert)];
  }
  PackAssignment node_of_group;
  if (current == nullptr) {
    node_of_group = balanced_packing(group_load, h.num_nodes, h.refine);
  } else {
    // A group prefers the node that holds most of its replicas now.
    std::vector<int32_t> preferred_node(static_cast<size_t>(h.num_groups), -1);
    std::vector<int> replicas_on_node(static_cast<size_t>(h.num_nodes));
    for (int group = 0; group < h.num_groups; ++group) {
      std::fill(replicas_on_node.begin(), replicas_on_node.end(), 0);
      for (int expert = group * group_size; expert < (group + 1) * group_size; ++expert) {
        for (int32_t gpu : current->gpus_of_expert[static_cast<size_t>(expert)]) {
          ++replicas_on_node[static_cast<size_t>(gpu / gpus_per_node)];
        }
      }
      const auto most = std::max_element(replicas_on_node.begin(), replicas_on_node.end());
      if (*most > 0) {
        preferred_node[static_cast<size_t>(group)] =
            static_cast<int32_t>(most - replicas_on_node.begin());
      }
    }
    node_of_group =
        sticky_balanced_packing(group_load, h.num_nodes, preferred_node, current->max_over_mean);
  }
  std::vector<int32_t> node_local_to_logical(static_cast<size_t>(h.num_logical));
  for (int group = 0; group < h.num_groups; ++group) {
    const int node = node_of_group.pack_of_item[static_cast<size_t>(group)];
    const int rank = node_of_group.rank_in_pack[static_cast<size_t>(group)];
    for (int j = 0; j < group_size; ++j) {
      const int node_local = node * logical_per_node + rank * group_size + j;
      node_local_to_logical[static_cast<size_t>(node_local)] = group * group_size + j;
    }
  }

  std::vector<double> node_loads(static_cast<size_t>(logical_per_node));
  for (int node = 0; node < h.num_nodes; ++node) {
    const int32_t* local_to_logical =
        node_local_to_logical.data() + static_cast<size_t>(node) * logical_per_node;
    for (int k = 0; k < logical_per_node; ++k) {
      node_loads[static_cast<size_t>(k)] = loads[static_cast<size_t>(local_to_logical[k])];
    }
    // Steps 2 and 3: replicate within the node, pack the replicas onto its GPUs. An incremental
    // plan first tries the replica counts the node runs with (a search may have chosen other
    // counts than the greedy's): kept if their packing meets the bound.
    const double node_load = std::accumulate(node_loads.begin(), node_loads.end(), 0.0);
    const double bound_load =
        current == nullptr ? 0.0 : node_load / gpus_per_node * current->max_over_mean;
    ReplicaLayout layout;
    bool kept_current_counts = false;
    if (current != nullptr) {
      std::vector<int32_t> counts(static_cast<size_t>(logical_per_node));
      int total = 0;
      for (int k = 0; k < logical_per_node; ++k) {
        counts[static_cast<size_t>(k)] = static_cast<int32_t>(
            current->gpus_of_expert[static_cast<size_t>(local_to_logical[k])].size());
        total += counts[static_cast<size_t>(k)];
      }
      if (total == physical_per_node &&
          std::find(counts.begin(), counts.end(), 0) == counts.end()) {
        layout = replicas_on_node_gpus(node_loads, replication_with_counts(counts), gpus_per_node,
                                       node, local_to_logical, current, h.refine);
        kept_current_counts = layout_max_gpu_load(node_loads, layout) <= bound_load;
      }
    }
    if (!kept_current_counts) {
      layout = replicas_on_node_gpus(node_loads, replicate_experts(node_loads, physical_per_node),
                                     gpus_per_node, node, local_to_logical, current, h.refine);
    }
    // Step 4: search for a better layout of the node's replicas, starting from this one.
    LayoutSearchSettings settings;
    settings.search = h.search;
    settings.seed = search_seed_of(h.search_seed, layer, node);
    settings.budget_share = 1.0 / h.num_nodes;
    if (current != nullptr) {
      // Incremental: only as far as the bound the sticky packing aims at, with local moves.
      settings.stop_at_max_load = bound_load;
      settings.allow_exact = false;
    }
    const LayoutSearchResult searched = improve_layout(node_loads, layout, settings);
    outcome.improved = outcome.improved || searched.improved;
    outcome.proven_optimal = outcome.proven_optimal && searched.proven_optimal;
    outcome.work += searched.work;

    std::vector<int32_t> next_rank(static_cast<size_t>(logical_per_node), 0);
    for (int gpu = 0; gpu < gpus_per_node; ++gpu) {
      for (int position = 0; position < slots_per_gpu; ++position) {
        const int32_t k =
            layout.experts_of_gpu[static_cast<size_t>(gpu)][static_cast<size_t>(position)];
        const size_t slot = static_cast<size_t>(node) * physical_per_node +
                            static_cast<size_t>(gpu) * slots_per_gpu +
                            static_cast<size_t>(position);
        phy2log[slot] = local_to_logical[k];
        replica_rank_of_slot[slot] = next_rank[static_cast<size_t>(k)]++;
      }
    }
    for (int k = 0; k < logical_per_node; ++k) {
      logcnt[static_cast<size_t>(local_to_logical[k])] =
          layout.replica_count[static_cast<size_t>(k)];
    }
  }
  return outcome;
}

}  // namespace

std::span<const int32_t> ExpertPlacement::phy2log(int layer) const {
  return std::span<const int32_t>(physical_to_logical)
      .subspan(static_cast<size_t>(layer) * num_physical_experts,
               static_cast<size_t>(num_physical_experts));
}

std::span<const int32_t> ExpertPlacement::log2phy(int layer, int logical_expert) const {
  const size_t row = static_cast<size_t>(layer) * num_logical_experts + logical_expert;
  return std::span<const int32_t>(logical_to_physical)
      .subspan(row * max_replicas, static_cast<size_t>(max_replicas));
}

std::span<const int32_t> ExpertPlacement::logcnt(int layer) const {
  return std::span<const int32_t>(logical_replica_count)
      .subspan(static_cast<size_t>(layer) * num_logical_experts,
               static_cast<size_t>(num_logical_experts));
}

namespace {

ExpertPlacement plan_placement(const ExpertLoads& loads, const PlacementConfig& config,
                               const ExpertPlacement* current, PlacementSearchReport* report) {
  ExpertPlacement placement;
  placement.num_layers = loads.num_layers;
  placement.num_logical_experts = loads.num_experts;
  placement.num_physical_experts = config.num_physical_experts;
  placement.num_gpus = config.num_gpus;
  placement.max_replicas = config.num_physical_experts - loads.num_experts + 1;
  // With one node the hierarchical plan is the global one, so auto calls it global.
  const bool hierarchical = config.policy == PlacementPolicy::kHierarchical ||
                            (config.policy == PlacementPolicy::kAuto && config.num_nodes > 1 &&
                             config.num_groups % config.num_nodes == 0);
  placement.policy = hierarchical ? PlacementPolicy::kHierarchical : PlacementPolicy::kGlobal;
  const Hierarchy hierarchy{loads.num_experts,
                            config.num_physical_experts,
                            hierarchical ? config.num_groups : 1,
                            hierarchical ? config.num_nodes : 1,
                            config.num_gpus,
                            config.refine_packing,
                            config.refine_packing ? config.search : PlacementSearch::kNone,
                            config.search_seed};
  if (report != nullptr) {
    report->proven_optimal.assign(static_cast<size_t>(loads.num_layers), 0);
    report->lower_bound.assign(static_cast<size_t>(loads.num_layers), 0.0);
    report->search_steps = 0;
  }

  const size_t num_physical = static_cast<size_t>(config.num_physical_experts);
  const size_t num_logical = static_cast<size_t>(loads.num_experts);
  const size_t max_replicas = static_cast<size_t>(placement.max_replicas);
  placement.physical_to_logical.assign(loads.num_layers * num_physical, -1);
  placement.logical_replica_count.assign(loads.num_layers * num_logical, 0);
  placement.logical_to_physical.assign(loads.num_layers * num_logical * max_replicas, -1);

  std::vector<int32_t> replica_rank_of_slot(num_physical);
  for (int layer = 0; layer < loads.num_layers; ++layer) {
    std::span<int32_t> phy2log(placement.physical_to_logical.data() + layer * num_physical,
                               num_physical);
    std::span<int32_t> logcnt(placement.logical_replica_count.data() + layer * num_logical,
                              num_logical);
    LayoutSearchResult searched;
    if (current == nullptr) {
      searched = plan_layer(loads.layer(layer), hierarchy, layer, nullptr, phy2log,
                            replica_rank_of_slot, logcnt);
    } else {
      const CurrentLayout layout =
          current_layout(*current, layer, config.incremental_max_over_mean);
      searched = plan_layer(loads.layer(layer), hierarchy, layer, &layout, phy2log,
                            replica_rank_of_slot, logcnt);
    }
    int32_t* log2phy = placement.logical_to_physical.data() + layer * num_logical * max_replicas;
    for (size_t slot = 0; slot < num_physical; ++slot) {
      log2phy[static_cast<size_t>(phy2log[slot]) * max_replicas +
              static_cast<size_t>(replica_rank_of_slot[slot])] = static_cast<int32_t>(slot);
    }
    if (report != nullptr) {
      const double bound =
          layout_lower_bound(loads.layer(layer), config.num_physical_experts, config.num_gpus);
      const std::vector<double> gpu_loads =
          gpu_loads_of_placement(loads.layer(layer), placement, layer);
      const double max_load = *std::max_element(gpu_loads.begin(), gpu_loads.end());
      // Per node an optimum is not the layer's optimum, unless there is one node.
      const bool optimal =
          max_load <= bound * (1 + 1e-9) || (searched.proven_optimal && hierarchy.num_nodes == 1);
      report->proven_optimal[static_cast<size_t>(layer)] = optimal ? 1 : 0;
      report->lower_bound[static_cast<size_t>(layer)] = bound;
      report->search_steps += searched.work;
    }
  }
  return placement;
}

}  // namespace

ExpertPlacement plan_expert_placement(const ExpertLoads& loads, const PlacementConfig& config,
                                      PlacementSearchReport* report) {
  validate(loads, config);
  return plan_placement(loads, config, nullptr, report);
}

ExpertPlacement plan_expert_placement_incremental(const ExpertLoads& loads,
                                                  const PlacementConfig& config,
                                                  const ExpertPlacement& current) {
  validate(loads, config);
  if (current.num_layers != loads.num_layers || current.num_logical_experts != loads.num_experts ||
      current.num_gpus != config.num_gpus) {
    fail("the current placement (" + std::to_string(current.num_layers) + " layers, " +
         std::to_string(current.num_logical_experts) + " experts, " +
         std::to_string(current.num_gpus) + " GPUs) does not match the loads (" +
         std::to_string(loads.num_layers) + " layers, " + std::to_string(loads.num_experts) +
         " experts) and num_gpus = " + std::to_string(config.num_gpus));
  }
  if (current.num_physical_experts <= 0 || current.num_physical_experts % current.num_gpus != 0 ||
      current.physical_to_logical.size() !=
          static_cast<size_t>(current.num_layers) * current.num_physical_experts) {
    fail(
        "the current placement is malformed (slots not a multiple of GPUs or phy2log of the "
        "wrong size)");
  }
  for (int32_t expert : current.physical_to_logical) {
    if (expert < 0 || expert >= loads.num_experts) {
      fail("the current placement holds logical expert " + std::to_string(expert) +
           ", outside [0, " + std::to_string(loads.num_experts) + ")");
    }
  }
  if (!(config.incremental_max_over_mean >= 1.0)) {
    fail("incremental_max_over_mean must be at least 1, got " +
         std::to_string(config.incremental_max_over_mean));
  }
  return plan_placement(loads, config, &current, nullptr);
}

}  // namespace moescope::balancer
