#include "moescope/balancer/expert_placement.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "balanced_packing.h"
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

// Plans one layer. Writes phy2log and the replica rank of each slot, and logcnt. With `current`
// the packings prefer to leave groups on their node and replicas on their GPU.
void plan_layer(std::span<const double> loads, const Hierarchy& h, const CurrentLayout* current,
                std::span<int32_t> phy2log, std::span<int32_t> replica_rank_of_slot,
                std::span<int32_t> logcnt) {
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
  std::vector<double> replica_loads(static_cast<size_t>(physical_per_node));
  for (int node = 0; node < h.num_nodes; ++node) {
    const int32_t* local_to_logical =
        node_local_to_logical.data() + static_cast<size_t>(node) * logical_per_node;
    for (int k = 0; k < logical_per_node; ++k) {
      node_loads[static_cast<size_t>(k)] = loads[static_cast<size_t>(local_to_logical[k])];
    }
    // Step 2: replicate within the node.
    const Replication replication = replicate_experts(node_loads, physical_per_node);
    for (int k = 0; k < logical_per_node; ++k) {
      logcnt[static_cast<size_t>(local_to_logical[k])] =
          replication.replica_count[static_cast<size_t>(k)];
    }
    for (int i = 0; i < physical_per_node; ++i) {
      const int32_t k = replication.physical_to_logical[static_cast<size_t>(i)];
      replica_loads[static_cast<size_t>(i)] =
          node_loads[static_cast<size_t>(k)] / replication.replica_count[static_cast<size_t>(k)];
    }
    // Step 3: the node's replicas onto its GPUs.
    PackAssignment gpu_of_replica;
    if (current == nullptr) {
      gpu_of_replica = balanced_packing(replica_loads, gpus_per_node, h.refine);
    } else {
      // Replica r of an expert prefers the r-th GPU of this node that holds the expert now.
      std::vector<int32_t> preferred_gpu(static_cast<size_t>(physical_per_node), -1);
      for (int i = 0; i < physical_per_node; ++i) {
        const int32_t expert =
            local_to_logical[replication.physical_to_logical[static_cast<size_t>(i)]];
        int rank = replication.replica_rank[static_cast<size_t>(i)];
        for (int32_t gpu : current->gpus_of_expert[static_cast<size_t>(expert)]) {
          if (gpu / gpus_per_node != node) continue;
          if (rank-- == 0) {
            preferred_gpu[static_cast<size_t>(i)] = gpu % gpus_per_node;
            break;
          }
        }
      }
      gpu_of_replica = sticky_balanced_packing(replica_loads, gpus_per_node, preferred_gpu,
                                               current->max_over_mean);
    }
    for (int i = 0; i < physical_per_node; ++i) {
      const size_t slot =
          static_cast<size_t>(node) * physical_per_node +
          static_cast<size_t>(gpu_of_replica.pack_of_item[static_cast<size_t>(i)]) * slots_per_gpu +
          static_cast<size_t>(gpu_of_replica.rank_in_pack[static_cast<size_t>(i)]);
      phy2log[slot] = local_to_logical[replication.physical_to_logical[static_cast<size_t>(i)]];
      replica_rank_of_slot[slot] = replication.replica_rank[static_cast<size_t>(i)];
    }
  }
}

}  // namespace

std::string_view placement_policy_name(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kAuto:
      return "auto";
    case PlacementPolicy::kHierarchical:
      return "hierarchical";
    case PlacementPolicy::kGlobal:
      return "global";
  }
  return "unknown";
}

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
                               const ExpertPlacement* current) {
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
                            config.refine_packing};

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
    if (current == nullptr) {
      plan_layer(loads.layer(layer), hierarchy, nullptr, phy2log, replica_rank_of_slot, logcnt);
    } else {
      const CurrentLayout layout =
          current_layout(*current, layer, config.incremental_max_over_mean);
      plan_layer(loads.layer(layer), hierarchy, &layout, phy2log, replica_rank_of_slot, logcnt);
    }
    int32_t* log2phy = placement.logical_to_physical.data() + layer * num_logical * max_replicas;
    for (size_t slot = 0; slot < num_physical; ++slot) {
      log2phy[static_cast<size_t>(phy2log[slot]) * max_replicas +
              static_cast<size_t>(replica_rank_of_slot[slot])] = static_cast<int32_t>(slot);
    }
  }
  return placement;
}

}  // namespace

ExpertPlacement plan_expert_placement(const ExpertLoads& loads, const PlacementConfig& config) {
  validate(loads, config);
  return plan_placement(loads, config, nullptr);
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
  return plan_placement(loads, config, &current);
}

ExpertPlacement make_identity_placement(int num_layers, int num_experts, int num_gpus) {
  if (num_layers <= 0 || num_experts <= 0 || num_gpus <= 0 || num_experts % num_gpus != 0) {
    throw std::invalid_argument("identity placement: num_experts (" + std::to_string(num_experts) +
                                ") must be a positive multiple of num_gpus (" +
                                std::to_string(num_gpus) + ") and num_layers (" +
                                std::to_string(num_layers) + ") positive");
  }
  ExpertPlacement placement;
  placement.num_layers = num_layers;
  placement.num_logical_experts = num_experts;
  placement.num_physical_experts = num_experts;
  placement.num_gpus = num_gpus;
  placement.max_replicas = 1;
  placement.policy = PlacementPolicy::kGlobal;
  for (int layer = 0; layer < num_layers; ++layer) {
    for (int expert = 0; expert < num_experts; ++expert) {
      placement.physical_to_logical.push_back(expert);
      placement.logical_to_physical.push_back(expert);
      placement.logical_replica_count.push_back(1);
    }
  }
  return placement;
}

ExpertPlacement placement_from_physical_to_logical(int num_layers, int num_logical_experts,
                                                   int num_gpus,
                                                   std::span<const int32_t> physical_to_logical) {
  if (num_layers <= 0 || num_logical_experts <= 0 || num_gpus <= 0 ||
      physical_to_logical.size() % static_cast<size_t>(num_layers) != 0) {
    fail("phy2log of " + std::to_string(physical_to_logical.size()) + " entries does not split " +
         "into num_layers = " + std::to_string(num_layers) + " layers (num_logical_experts = " +
         std::to_string(num_logical_experts) + ", num_gpus = " + std::to_string(num_gpus) + ")");
  }
  const int num_slots = static_cast<int>(physical_to_logical.size() / num_layers);
  if (num_slots % num_gpus != 0 || num_slots < num_logical_experts) {
    fail("phy2log has " + std::to_string(num_slots) + " slots per layer; they must be a multiple " +
         "of num_gpus = " + std::to_string(num_gpus) + " and at least the " +
         std::to_string(num_logical_experts) + " logical experts");
  }
  ExpertPlacement placement;
  placement.num_layers = num_layers;
  placement.num_logical_experts = num_logical_experts;
  placement.num_physical_experts = num_slots;
  placement.num_gpus = num_gpus;
  placement.max_replicas = num_slots - num_logical_experts + 1;
  placement.policy = PlacementPolicy::kGlobal;
  placement.physical_to_logical.assign(physical_to_logical.begin(), physical_to_logical.end());
  placement.logical_replica_count.assign(static_cast<size_t>(num_layers) * num_logical_experts, 0);
  placement.logical_to_physical.assign(
      static_cast<size_t>(num_layers) * num_logical_experts * placement.max_replicas, -1);
  for (int layer = 0; layer < num_layers; ++layer) {
    int32_t* logcnt =
        placement.logical_replica_count.data() + static_cast<size_t>(layer) * num_logical_experts;
    int32_t* log2phy = placement.logical_to_physical.data() +
                       static_cast<size_t>(layer) * num_logical_experts * placement.max_replicas;
    for (int slot = 0; slot < num_slots; ++slot) {
      const int32_t expert =
          physical_to_logical[static_cast<size_t>(layer) * num_slots + static_cast<size_t>(slot)];
      if (expert < 0 || expert >= num_logical_experts) {
        fail("phy2log of layer " + std::to_string(layer) + " slot " + std::to_string(slot) +
             " holds expert " + std::to_string(expert) + ", outside [0, " +
             std::to_string(num_logical_experts) + ")");
      }
      // Every expert has a slot (checked below), so no expert can exceed max_replicas.
      const int32_t rank = logcnt[expert]++;
      if (rank < placement.max_replicas) {
        log2phy[static_cast<size_t>(expert) * placement.max_replicas + rank] = slot;
      }
    }
    for (int expert = 0; expert < num_logical_experts; ++expert) {
      if (logcnt[expert] == 0) {
        fail("phy2log of layer " + std::to_string(layer) + " has no slot for expert " +
             std::to_string(expert));
      }
    }
  }
  return placement;
}

std::vector<double> gpu_loads_of_placement(std::span<const double> loads,
                                           const ExpertPlacement& placement, int layer) {
  if (loads.size() != static_cast<size_t>(placement.num_logical_experts)) {
    throw std::invalid_argument("gpu_loads_of_placement: loads has " +
                                std::to_string(loads.size()) + " experts, the placement " +
                                std::to_string(placement.num_logical_experts));
  }
  if (layer < 0 || layer >= placement.num_layers) {
    throw std::invalid_argument("gpu_loads_of_placement: layer " + std::to_string(layer) +
                                " out of range [0, " + std::to_string(placement.num_layers) + ")");
  }
  std::vector<double> gpu_load(static_cast<size_t>(placement.num_gpus), 0.0);
  const auto phy2log = placement.phy2log(layer);
  const auto logcnt = placement.logcnt(layer);
  const int slots_per_gpu = placement.slots_per_gpu();
  for (size_t slot = 0; slot < phy2log.size(); ++slot) {
    const auto expert = static_cast<size_t>(phy2log[slot]);
    gpu_load[slot / static_cast<size_t>(slots_per_gpu)] += loads[expert] / logcnt[expert];
  }
  return gpu_load;
}

std::vector<double> gpu_loads_without_replicas(std::span<const double> loads, int num_gpus) {
  if (num_gpus <= 0) {
    throw std::invalid_argument("gpu_loads_without_replicas: num_gpus must be positive, got " +
                                std::to_string(num_gpus));
  }
  std::vector<double> gpu_load(static_cast<size_t>(num_gpus), 0.0);
  const size_t num_experts = loads.size();
  for (size_t expert = 0; expert < num_experts; ++expert) {
    gpu_load[expert * static_cast<size_t>(num_gpus) / num_experts] += loads[expert];
  }
  return gpu_load;
}

GpuLoadBalance summarize_gpu_loads(std::span<const double> gpu_loads) {
  GpuLoadBalance balance;
  if (gpu_loads.empty()) return balance;
  double total = 0.0;
  for (double load : gpu_loads) {
    total += load;
    balance.max_gpu_load = std::max(balance.max_gpu_load, load);
  }
  balance.mean_gpu_load = total / static_cast<double>(gpu_loads.size());
  return balance;
}

}  // namespace moescope::balancer
