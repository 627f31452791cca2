// Expert placement planner with the contract of DeepSeek's EPLB: from per-layer expert loads
// and the number of physical expert slots, decide how many replicas each logical expert gets and
// which slot (and so which GPU) holds each replica, so that every GPU carries about the same load.
//
// Slots are numbered GPU-major: slot p lives on GPU p / slots_per_gpu, and GPU g on node
// g / gpus_per_node. A logical expert's load is assumed to be split evenly among its replicas
// (the runtime spreads its tokens that way).
//
// Plain C++ (no torch): used by the runtime's rebalancer and by `moescope plan`.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moescope/balancer/expert_loads.h"

namespace moescope::balancer {

enum class PlacementPolicy {
  kAuto,          // hierarchical when num_nodes > 1 and num_groups % num_nodes == 0, else global
  kHierarchical,  // groups packed onto nodes, replicas made within a node, then packed on GPUs
  kGlobal,        // one group, one node: replicate over all experts, pack onto all GPUs
};

/// Each policy by the name `moescope plan --policy` and the plan's JSON use.
inline constexpr std::array<std::pair<std::string_view, PlacementPolicy>, 3> kPlacementPolicyNames{{
    {"auto", PlacementPolicy::kAuto},
    {"hierarchical", PlacementPolicy::kHierarchical},
    {"global", PlacementPolicy::kGlobal},
}};

/// How hard the planner looks beyond the greedy plan (EPLB's heuristic plus swap refinement).
/// Every search starts from the greedy plan and keeps it unless it finds a strictly lower
/// maximum GPU load, so it is never worse. Its effort is a fixed count of search steps (the
/// same plan on every machine), and random choices come from PlacementConfig::search_seed.
enum class PlacementSearch {
  kNone,  // the greedy plan as it is
  /// Branch and bound over replica counts and packing where the problem is small (a layer, or
  /// one node's share of it, of at most 24 slots), then a bounded local search (swaps of
  /// replicas between GPUs, moving a replica slot from one expert to another, seeded kicks).
  kAuto,
  /// Branch and bound on every problem with a large node budget (1e9 nodes: exact on small and
  /// medium problems, slow on large ones), then a local search ten times as long as kAuto's.
  kExhaustive,
};

/// Each search by the name `moescope plan --search` and the plan's JSON use.
inline constexpr std::array<std::pair<std::string_view, PlacementSearch>, 3> kPlacementSearchNames{{
    {"none", PlacementSearch::kNone},
    {"auto", PlacementSearch::kAuto},
    {"exhaustive", PlacementSearch::kExhaustive},
}};

/// The name of `value` in one of the tables above ("unknown" for a value it lacks).
template <typename Enum, size_t N>
constexpr std::string_view name_in(const std::array<std::pair<std::string_view, Enum>, N>& table,
                                   Enum value) {
  for (const auto& [name, named] : table) {
    if (named == value) return name;
  }
  return "unknown";
}

/// The value `name` stands for in one of the tables above; nullopt for another name.
template <typename Enum, size_t N>
constexpr std::optional<Enum> value_in(
    const std::array<std::pair<std::string_view, Enum>, N>& table, std::string_view name) {
  for (const auto& [named, value] : table) {
    if (named == name) return value;
  }
  return std::nullopt;
}

struct PlacementConfig {
  int num_physical_experts = 0;  // slots over all GPUs ("num_replicas" in EPLB)
  int num_groups = 1;            // expert groups of group-limited routing
  int num_nodes = 1;             // server nodes (GPUs of a node share a fast interconnect)
  int num_gpus = 1;
  PlacementPolicy policy = PlacementPolicy::kAuto;
  /// After the greedy balanced packing, swap items between the heaviest pack and the others
  /// while that lowers the heaviest pack. Off reproduces the published greedy exactly (no
  /// search either, whatever `search` says).
  bool refine_packing = true;
  /// The search after the greedy plan (see PlacementSearch).
  PlacementSearch search = PlacementSearch::kAuto;
  /// Seed of the search's random choices; each layer (and node) derives its own from it.
  uint64_t search_seed = 0;
  /// Incremental planning only: experts stay where they are as long as no GPU (and no node) is
  /// pushed above this max/mean of the predicted load; swaps then bring the heaviest GPU down to
  /// it. Lower balances better and moves more weights. At least 1.
  double incremental_max_over_mean = 1.02;
};

/// The planner's result; the three tables of EPLB, flattened row-major.
struct ExpertPlacement {
  int num_layers = 0;
  int num_logical_experts = 0;
  int num_physical_experts = 0;
  int num_gpus = 0;
  int max_replicas = 0;  // num_physical - num_logical + 1: the most replicas one expert can get
  PlacementPolicy policy = PlacementPolicy::kGlobal;  // the policy used (never kAuto)

  std::vector<int32_t> physical_to_logical;    // [num_layers, num_physical_experts]
  std::vector<int32_t> logical_to_physical;    // [num_layers, num_logical, max_replicas], -1 pad
  std::vector<int32_t> logical_replica_count;  // [num_layers, num_logical_experts]

  int slots_per_gpu() const { return num_gpus > 0 ? num_physical_experts / num_gpus : 0; }
  /// Logical expert held by each slot of a layer: [num_physical_experts].
  std::span<const int32_t> phy2log(int layer) const;
  /// Slots holding replicas of one logical expert, -1 padded: [max_replicas].
  std::span<const int32_t> log2phy(int layer, int logical_expert) const;
  /// Replica count of each logical expert of a layer: [num_logical_experts].
  std::span<const int32_t> logcnt(int layer) const;
};

/// What the search found, per layer.
struct PlacementSearchReport {
  /// 1 where the layer's plan is proven to have the lowest possible maximum GPU load under the
  /// policy's constraints (the exact search finished, or the plan meets the lower bound).
  std::vector<uint8_t> proven_optimal;  // [num_layers]
  /// A lower bound on the maximum GPU load of any plan of the layer (global policy): the mean
  /// GPU load, and the smallest possible largest replica.
  std::vector<double> lower_bound;  // [num_layers]
  int64_t search_steps = 0;         // branch-and-bound nodes plus local moves evaluated
};

/// Plans the placement for every layer. Throws std::invalid_argument naming the bad parameter
/// when the configuration is impossible (slots not a multiple of GPUs, GPUs not a multiple of
/// nodes, experts not a multiple of groups, fewer slots than experts, hierarchical requested with
/// groups not a multiple of nodes) or a load is negative or not finite, or the loads are empty.
/// `report`, when given, receives what the search found.
ExpertPlacement plan_expert_placement(const ExpertLoads& loads, const PlacementConfig& config,
                                      PlacementSearchReport* report = nullptr);

/// Plans like plan_expert_placement, but starting from the placement the model runs with:
/// replica counts are recomputed from the loads, then each replica stays on a GPU that holds its
/// expert now (and each group on its node) unless that GPU would exceed
/// config.incremental_max_over_mean x the mean load; only the rest is placed anew. If the
/// result is still above that bound, the local search (no branch and bound, which would
/// reshuffle everything) improves it until it meets the bound or its budget ends. Far fewer
/// expert weights move than with a fresh plan, at a small cost in balance. `current` must have
/// the same layers, logical experts and GPUs (its slot count may differ). Throws
/// std::invalid_argument like plan_expert_placement, or naming the mismatch with `current`.
ExpertPlacement plan_expert_placement_incremental(const ExpertLoads& loads,
                                                  const PlacementConfig& config,
                                                  const ExpertPlacement& current);

/// The placement a model starts with: one replica per expert, experts split contiguously over
/// the GPUs (slot e holds expert e). Throws std::invalid_argument unless num_experts is a
/// positive multiple of num_gpus.
ExpertPlacement make_identity_placement(int num_layers, int num_experts, int num_gpus);

/// Rebuilds a placement from its physical_to_logical table ([num_layers, num_slots], e.g. read
/// back from `moescope plan --json`): replica counts and log2phy are derived, replica ranks in
/// slot order. Throws std::invalid_argument when the table does not divide into layers of
/// whole GPUs, names an expert outside [0, num_logical_experts), or leaves an expert without
/// a replica in some layer.
ExpertPlacement placement_from_physical_to_logical(int num_layers, int num_logical_experts,
                                                   int num_gpus,
                                                   std::span<const int32_t> physical_to_logical);

/// Per-GPU load of one layer under a placement: [num_gpus]. `loads`: [num_logical_experts].
std::vector<double> gpu_loads_of_placement(std::span<const double> loads,
                                           const ExpertPlacement& placement, int layer);

/// Per-GPU load without replicas, logical experts split contiguously over the GPUs (expert e on
/// GPU e * num_gpus / num_experts): the placement a model starts with. Returns [num_gpus].
std::vector<double> gpu_loads_without_replicas(std::span<const double> loads, int num_gpus);

struct GpuLoadBalance {
  double max_gpu_load = 0.0;
  double mean_gpu_load = 0.0;
  /// max/mean; 1 when nothing is loaded (an idle layer is perfectly balanced).
  double max_over_mean() const { return mean_gpu_load > 0.0 ? max_gpu_load / mean_gpu_load : 1.0; }
};

GpuLoadBalance summarize_gpu_loads(std::span<const double> gpu_loads);

}  // namespace moescope::balancer
