// `moescope plan`: plans expert placement (replicas + slots per GPU) from per-layer expert loads
// with the balancer's EPLB-contract planner, and shows the per-GPU balance before and after.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "moescope/runtime/expert_loads.h"
#include "moescope/runtime/expert_placement.h"

namespace moescope::cli {

/// Mean tokens per expert per step of every MoE layer ([num_layers, num_experts]) recorded in
/// .moetrace files. Needs the analysis trace model, which this build does not link yet: it
/// throws a std::runtime_error saying so.
runtime::ExpertLoads load_expert_loads_from_traces(const std::vector<std::string>& trace_paths);

runtime::ExpertLoads load_expert_loads_from_traces(const std::vector<std::string>& trace_paths) {
  throw std::runtime_error(
      "reading loads from traces needs the analysis library, which this "
      "build of moescope does not include (" +
      std::to_string(trace_paths.size()) +
      " trace(s) given); pass the loads with --loads FILE instead");
}

namespace {

struct PlanOptions {
  int num_gpus = 0;
  int num_slots = 0;
  int num_nodes = 1;
  int num_groups = 1;
  std::string policy = "auto";
  bool greedy_only = false;
  std::string loads_file;
  std::vector<std::string> traces;
  std::string json_output;
};

struct LayerBalance {
  std::vector<double> gpu_loads_before;
  std::vector<double> gpu_loads_after;
  runtime::GpuLoadBalance before;
  runtime::GpuLoadBalance after;
};

runtime::PlacementPolicy parse_policy(const std::string& name) {
  if (name == "auto") return runtime::PlacementPolicy::kAuto;
  if (name == "hierarchical") return runtime::PlacementPolicy::kHierarchical;
  if (name == "global") return runtime::PlacementPolicy::kGlobal;
  throw std::invalid_argument("--policy must be auto, hierarchical or global, got '" + name + "'");
}

std::string format_number(double value, const char* format) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

struct PlanSummary {
  double mean_before = 0.0, mean_after = 0.0;    // max/mean per GPU, averaged over layers
  double worst_before = 0.0, worst_after = 0.0;  // the worst layer's
};

PlanSummary summarize(const std::vector<LayerBalance>& balances) {
  PlanSummary summary;
  for (const LayerBalance& balance : balances) {
    summary.mean_before += balance.before.max_over_mean() / static_cast<double>(balances.size());
    summary.mean_after += balance.after.max_over_mean() / static_cast<double>(balances.size());
    summary.worst_before = std::max(summary.worst_before, balance.before.max_over_mean());
    summary.worst_after = std::max(summary.worst_after, balance.after.max_over_mean());
  }
  return summary;
}

// The placement as JSON text: the header fields, then one line per layer, so that large plans
// stay readable and diffable.
std::string placement_json(const PlanOptions& options, const runtime::ExpertPlacement& plan,
                           const std::vector<LayerBalance>& balances) {
  using ordered_json = nlohmann::ordered_json;
  const PlanSummary summary = summarize(balances);
  const ordered_json header = {
      {"num_layers", plan.num_layers},
      {"num_logical_experts", plan.num_logical_experts},
      {"num_physical_experts", plan.num_physical_experts},
      {"num_gpus", plan.num_gpus},
      {"num_nodes", options.num_nodes},
      {"num_groups", options.num_groups},
      {"max_replicas", plan.max_replicas},
      {"policy", std::string(runtime::placement_policy_name(plan.policy))},
      {"refine_packing", !options.greedy_only},
      {"summary",
       {{"mean_max_over_mean_before", summary.mean_before},
        {"mean_max_over_mean_after", summary.mean_after},
        {"worst_max_over_mean_before", summary.worst_before},
        {"worst_max_over_mean_after", summary.worst_after}}},
  };
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
    const ordered_json entry = {
        {"layer", layer},
        {"max_over_mean_before", balance.before.max_over_mean()},
        {"max_over_mean_after", balance.after.max_over_mean()},
        {"gpu_loads_before", balance.gpu_loads_before},
        {"gpu_loads_after", balance.gpu_loads_after},
        {"phy2log", std::vector<int32_t>(phy2log.begin(), phy2log.end())},
        {"logcnt", std::vector<int32_t>(logcnt.begin(), logcnt.end())},
        {"log2phy", log2phy},
    };
    text += "    " + entry.dump() + (layer + 1 < plan.num_layers ? ",\n" : "\n");
  }
  text += "  ]\n}\n";
  return text;
}

void print_placement(std::ostream& out, const PlanOptions& options,
                     const runtime::ExpertPlacement& plan,
                     const std::vector<LayerBalance>& balances, bool with_slots) {
  out << "plan: " << plan.num_layers << (plan.num_layers == 1 ? " layer" : " layers") << " x "
      << plan.num_logical_experts << " experts -> " << plan.num_physical_experts << " slots on "
      << plan.num_gpus << " GPUs (" << plan.slots_per_gpu() << " per GPU), " << options.num_nodes
      << (options.num_nodes == 1 ? " node, " : " nodes, ") << options.num_groups
      << (options.num_groups == 1 ? " group" : " groups") << ", policy "
      << runtime::placement_policy_name(plan.policy)
      << (options.greedy_only ? ", greedy packing" : ", refined packing") << "\n";
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    const LayerBalance& balance = balances[static_cast<size_t>(layer)];
    out << "layer " << layer << ": max/mean per-GPU load "
        << format_number(balance.before.max_over_mean(), "%.4f") << " -> "
        << format_number(balance.after.max_over_mean(), "%.4f") << " (max "
        << format_number(balance.before.max_gpu_load, "%.6g") << " -> "
        << format_number(balance.after.max_gpu_load, "%.6g") << ", mean "
        << format_number(balance.after.mean_gpu_load, "%.6g") << ")\n";
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
      << format_number(summary.worst_after, "%.4f") << "\n";
}

void run_plan(const PlanOptions& options) {
  if (options.loads_file.empty() == options.traces.empty()) {
    throw std::invalid_argument("give the loads either with --loads FILE or as TRACE files");
  }
  const runtime::ExpertLoads loads = options.loads_file.empty()
                                         ? load_expert_loads_from_traces(options.traces)
                                         : runtime::read_expert_loads_file(options.loads_file);

  runtime::PlacementConfig config;
  config.num_physical_experts = options.num_slots;
  config.num_gpus = options.num_gpus;
  config.num_nodes = options.num_nodes;
  config.num_groups = options.num_groups;
  config.policy = parse_policy(options.policy);
  config.refine_packing = !options.greedy_only;
  const runtime::ExpertPlacement plan = runtime::plan_expert_placement(loads, config);

  std::vector<LayerBalance> balances(static_cast<size_t>(plan.num_layers));
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    LayerBalance& balance = balances[static_cast<size_t>(layer)];
    balance.gpu_loads_before =
        runtime::gpu_loads_without_replicas(loads.layer(layer), plan.num_gpus);
    balance.gpu_loads_after = runtime::gpu_loads_of_placement(loads.layer(layer), plan, layer);
    balance.before = runtime::summarize_gpu_loads(balance.gpu_loads_before);
    balance.after = runtime::summarize_gpu_loads(balance.gpu_loads_after);
  }

  if (options.json_output.empty()) {
    print_placement(std::cout, options, plan, balances, /*with_slots=*/true);
    return;
  }
  const std::string json = placement_json(options, plan, balances);
  if (options.json_output == "-") {
    std::cout << json;
    return;
  }
  std::ofstream file(options.json_output, std::ios::binary);
  file << json;
  file.close();
  if (!file) throw std::runtime_error(options.json_output + ": cannot write the JSON output");
  print_placement(std::cout, options, plan, balances, /*with_slots=*/false);
  std::cout << "placement written to " << options.json_output << "\n";
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plan expert replicas and their placement on GPUs from per-layer expert loads "
      "(DeepSeek EPLB contract) and show max/mean per-GPU load before and after");
  plan->add_option("--gpus", options->num_gpus, "GPUs (expert-parallel ranks)")
      ->required()
      ->check(CLI::PositiveNumber);
  plan->add_option("--slots", options->num_slots,
                   "physical expert slots over all GPUs (experts + redundant replicas)")
      ->required()
      ->check(CLI::PositiveNumber);
  plan->add_option("--nodes", options->num_nodes, "server nodes (default 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--groups", options->num_groups, "expert groups (default 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--policy", options->policy,
                   "auto (hierarchical when nodes > 1 and groups % nodes == 0), hierarchical "
                   "or global")
      ->check(CLI::IsMember({"auto", "hierarchical", "global"}));
  plan->add_flag("--greedy", options->greedy_only,
                 "greedy balanced packing only, exactly as published (no swap refinement)");
  plan->add_option("--json", options->json_output,
                   "write the placement as JSON to this file ('-' for stdout)");
  CLI::Option* loads_option = plan->add_option(
      "--loads", options->loads_file,
      "JSON ([[...], ...] layers x experts, or {\"loads\": ...}) or CSV (one layer per row)");
  CLI::Option* traces_option =
      plan->add_option("traces", options->traces, ".moetrace files to read the expert loads from");
  loads_option->excludes(traces_option);
  plan->callback([options] {
    try {
      run_plan(*options);
    } catch (const std::exception& error) {
      std::cerr << "moescope plan: error: " << error.what() << "\n";
      throw CLI::RuntimeError(1);
    }
  });
}

}  // namespace moescope::cli
