// `moescope plan`'s placement output (plan_placement_output.h).
#include "plan_placement_output.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "plan_prediction_output.h"

namespace moescope::cli {
namespace {

// What the plan line says about the method.
std::string method_description(const PlanOptions& options) {
  if (options.greedy_only) return "greedy packing";
  return "refined packing, search " + options.search;
}

std::string format_number(double value, const char* format) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

struct PlanSummary {
  double mean_before = 0.0, mean_after = 0.0;    // max/mean per GPU, averaged over layers
  double worst_before = 0.0, worst_after = 0.0;  // the worst layer's
  size_t copies = 0, fresh_plan_copies = 0;      // expert copies over all layers (--current)
};

PlanSummary summarize(const std::vector<LayerBalance>& balances) {
  PlanSummary summary;
  for (const LayerBalance& balance : balances) {
    summary.mean_before += balance.before.max_over_mean() / static_cast<double>(balances.size());
    summary.mean_after += balance.after.max_over_mean() / static_cast<double>(balances.size());
    summary.worst_before = std::max(summary.worst_before, balance.before.max_over_mean());
    summary.worst_after = std::max(summary.worst_after, balance.after.max_over_mean());
    summary.copies += balance.moves.size();
    summary.fresh_plan_copies += balance.fresh_plan_copies;
  }
  return summary;
}

}  // namespace

std::string placement_json(const PlanOptions& options, const balancer::ExpertPlacement& plan,
                           const std::vector<LayerBalance>& balances,
                           const std::optional<analysis::PlacementPrediction>& prediction,
                           const std::optional<analysis::RebalanceAdvice>& advice) {
  using ordered_json = nlohmann::ordered_json;
  const PlanSummary summary = summarize(balances);
  ordered_json header = {
      {"num_layers", plan.num_layers},
      {"num_logical_experts", plan.num_logical_experts},
      {"num_physical_experts", plan.num_physical_experts},
      {"num_gpus", plan.num_gpus},
      {"num_nodes", options.num_nodes},
      {"num_groups", options.num_groups},
      {"max_replicas", plan.max_replicas},
      {"policy", std::string(balancer::name_in(balancer::kPlacementPolicyNames, plan.policy))},
      {"refine_packing", !options.greedy_only},
      {"search", options.greedy_only ? "none" : options.search},
      {"search_seed", options.search_seed},
      {"before", options.current_placement.empty() ? "identity" : "current"},
      {"summary",
       {{"mean_max_over_mean_before", summary.mean_before},
        {"mean_max_over_mean_after", summary.mean_after},
        {"worst_max_over_mean_before", summary.worst_before},
        {"worst_max_over_mean_after", summary.worst_after}}},
  };
  if (!options.current_placement.empty()) {
    header["current_placement"] = options.current_placement;
    header["incremental_max_over_mean"] = options.incremental_bound;
    header["summary"]["expert_copies"] = summary.copies;
    header["summary"]["fresh_plan_expert_copies"] = summary.fresh_plan_copies;
  }
  std::string text = "{\n";
  for (auto field = header.begin(); field != header.end(); ++field) {
    text += "  " + ordered_json(field.key()).dump() + ": " + field.value().dump() + ",\n";
  }
  text += "  \"layers\": [\n";
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    const LayerBalance& balance = balances[static_cast<size_t>(layer)];
    ordered_json log2phy = ordered_json::array();
    for (int expert = 0; expert < plan.num_logical_experts; ++expert) {
      const auto slots = plan.log2phy(layer, expert);
      log2phy.push_back(std::vector<int32_t>(slots.begin(), slots.end()));
    }
    const auto phy2log = plan.phy2log(layer);
    const auto logcnt = plan.logcnt(layer);
    ordered_json entry = {
        {"layer", layer},
        {"max_over_mean_before", balance.before.max_over_mean()},
        {"max_over_mean_after", balance.after.max_over_mean()},
        {"gpu_loads_before", balance.gpu_loads_before},
        {"gpu_loads_after", balance.gpu_loads_after},
        {"phy2log", std::vector<int32_t>(phy2log.begin(), phy2log.end())},
        {"logcnt", std::vector<int32_t>(logcnt.begin(), logcnt.end())},
        {"log2phy", log2phy},
    };
    if (options.current_placement.empty()) {
      entry["proven_optimal"] = balance.proven_optimal;
      entry["lower_bound_max_over_mean"] = balance.after.mean_gpu_load > 0.0
                                               ? balance.lower_bound / balance.after.mean_gpu_load
                                               : 1.0;
    } else {
      ordered_json moves = ordered_json::array();
      for (const balancer::ExpertMove& move : balance.moves) {
        moves.push_back({move.logical_expert, move.from_gpu, move.to_gpu});
      }
      entry["expert_copies"] = balance.moves.size();
      entry["moves"] = moves;  // [expert, from GPU, to GPU]
      entry["fresh_plan_expert_copies"] = balance.fresh_plan_copies;
      entry["fresh_plan_max_over_mean"] = balance.fresh_plan_max_over_mean;
    }
    text += "    " + entry.dump() + (layer + 1 < plan.num_layers ? ",\n" : "\n");
  }
  text += "  ]";
  if (prediction) text += ",\n  \"prediction\": " + analysis::prediction_to_json(*prediction);
  if (advice) text += ",\n  \"advice\": " + advice_json(*advice);
  text += "\n}\n";
  return text;
}

void print_placement(std::ostream& out, const PlanOptions& options,
                     const balancer::ExpertPlacement& plan,
                     const std::vector<LayerBalance>& balances, bool with_slots) {
  out << "plan: " << plan.num_layers << (plan.num_layers == 1 ? " layer" : " layers") << " x "
      << plan.num_logical_experts << " experts -> " << plan.num_physical_experts << " slots on "
      << plan.num_gpus << " GPUs (" << plan.slots_per_gpu() << " per GPU), " << options.num_nodes
      << (options.num_nodes == 1 ? " node, " : " nodes, ") << options.num_groups
      << (options.num_groups == 1 ? " group" : " groups") << ", policy "
      << balancer::name_in(balancer::kPlacementPolicyNames, plan.policy) << ", "
      << method_description(options) << "\n";
  if (options.current_placement.empty()) {
    out << "before: experts split contiguously over the GPUs, no replicas\n";
  } else {
    out << "before: the current placement " << options.current_placement
        << "; incremental plan, experts stay while max/mean <= "
        << format_number(options.incremental_bound, "%.4g") << "\n";
  }
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    const LayerBalance& balance = balances[static_cast<size_t>(layer)];
    out << "layer " << layer << ": max/mean per-GPU load "
        << format_number(balance.before.max_over_mean(), "%.4f") << " -> "
        << format_number(balance.after.max_over_mean(), "%.4f") << " (max "
        << format_number(balance.before.max_gpu_load, "%.6g") << " -> "
        << format_number(balance.after.max_gpu_load, "%.6g") << ", mean "
        << format_number(balance.after.mean_gpu_load, "%.6g") << ")"
        << (balance.proven_optimal ? ", optimal" : "") << "\n";
    if (!options.current_placement.empty()) {
      out << "  expert copies: " << balance.moves.size()
          << " (a fresh plan: " << balance.fresh_plan_copies << " copies, max/mean "
          << format_number(balance.fresh_plan_max_over_mean, "%.4f") << ")";
      if (with_slots) {
        for (const balancer::ExpertMove& move : balance.moves) {
          out << (&move == balance.moves.data() ? ": " : ", ") << move.logical_expert << " gpu "
              << move.from_gpu << " -> " << move.to_gpu;
        }
      }
      out << "\n";
    }
    if (!with_slots) continue;

    const auto phy2log = plan.phy2log(layer);
    const int slots_per_gpu = plan.slots_per_gpu();
    for (int gpu = 0; gpu < plan.num_gpus; ++gpu) {
      out << "  gpu " << gpu << " load "
          << format_number(balance.gpu_loads_after[static_cast<size_t>(gpu)], "%.6g") << ":";
      for (int k = 0; k < slots_per_gpu; ++k) out << " " << phy2log[gpu * slots_per_gpu + k];
      out << "\n";
    }
    const auto logcnt = plan.logcnt(layer);
    std::string replicated;
    for (size_t expert = 0; expert < logcnt.size(); ++expert) {
      if (logcnt[expert] > 1) {
        replicated += " " + std::to_string(expert) + "x" + std::to_string(logcnt[expert]);
      }
    }
    out << "  replicated:" << (replicated.empty() ? " none" : replicated) << "\n";
  }
  const PlanSummary summary = summarize(balances);
  out << "all layers: max/mean per-GPU load mean " << format_number(summary.mean_before, "%.4f")
      << " -> " << format_number(summary.mean_after, "%.4f") << ", worst "
      << format_number(summary.worst_before, "%.4f") << " -> "
      << format_number(summary.worst_after, "%.4f");
  if (!options.current_placement.empty()) {
    out << "; expert copies " << summary.copies << " (a fresh plan: " << summary.fresh_plan_copies
        << ")";
  }
  out << "\n";
}

}  // namespace moescope::cli
