// `moescope plan`: plans expert placement (replicas + slots per GPU) from per-layer expert loads
// with the balancer's EPLB-contract planner, and shows the per-GPU balance before and after.
// From traces it reads the ranks' summaries where they exist, with the same numbers
// (run_inputs.h); --detail forces the traces.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "command_output.h"
#include "commands.h"
#include "moescope/analysis/expert_load_analysis.h"
#include "moescope/analysis/placement_prediction.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_loader.h"
#include "moescope/balancer/expert_loads.h"
#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"
#include "moescope/balancer/next_window_placement.h"
#include "plan_change_costs.h"
#include "plan_inputs.h"
#include "plan_next_window.h"
#include "plan_options.h"
#include "plan_placement_output.h"
#include "plan_prediction_output.h"
#include "plan_replay.h"
#include "plan_step_loads.h"
#include "run_inputs.h"

namespace moescope::cli {

/// Mean tokens per expert per step of every MoE layer ([num_layers, num_experts]) recorded in
/// .moetrace files (any mix of ranks), through the analysis trace model: the tokens of
/// analysis::expert_load_matrix (the report's and the viewer's numbers) averaged over the
/// layer's steps. Layers are planned in the order of their ids. Throws std::runtime_error
/// when no trace holds expert loads or layers disagree on the number of experts.
balancer::ExpertLoads expert_loads_of_model(const analysis::TraceModel& model,
                                            const std::vector<std::string>& trace_paths);

balancer::ExpertLoads expert_loads_of_model(const analysis::TraceModel& model,
                                            const std::vector<std::string>& trace_paths) {
  const analysis::ExpertLoadAnalysis per_layer = analysis::analyze_expert_load(model);
  if (per_layer.empty()) {
    throw std::runtime_error("no expert-load samples in the given trace(s) (" +
                             std::to_string(trace_paths.size()) +
                             " file(s)); record them with MoELayer or moescope_expert_load()");
  }
  const analysis::ExpertLoadMatrix tokens_over_steps = analysis::expert_load_matrix(model);
  balancer::ExpertLoads loads;
  loads.num_experts = static_cast<int>(per_layer.layers.front().num_experts);
  std::string layer_ids;
  bool ids_are_dense = true;  // trace layer ids 0..n-1
  for (const analysis::LayerLoad& layer : per_layer.layers) {
    if (static_cast<int>(layer.num_experts) != loads.num_experts) {
      throw std::runtime_error("trace layer " + std::to_string(layer.layer) + " has " +
                               std::to_string(layer.num_experts) + " experts, layer " +
                               std::to_string(per_layer.layers.front().layer) + " has " +
                               std::to_string(loads.num_experts) +
                               "; the planner needs the same number in every layer");
    }
    const int matrix_row = tokens_over_steps.row_of(layer.layer);
    std::vector<double> row(static_cast<size_t>(loads.num_experts), 0.0);
    for (int e = 0; e < loads.num_experts && e < tokens_over_steps.num_experts; ++e) {
      row[static_cast<size_t>(e)] = tokens_over_steps.per_step_at(matrix_row, e);
    }
    loads.values.insert(loads.values.end(), row.begin(), row.end());
    layer_ids += (layer_ids.empty() ? "" : ", ") + std::to_string(layer.layer);
    ids_are_dense = ids_are_dense && layer.layer == static_cast<uint32_t>(loads.num_layers);
    ++loads.num_layers;
  }
  if (!ids_are_dense) {
    std::cerr << "moescope plan: the traces hold layers " << layer_ids
              << "; they are planned as layers 0.." << loads.num_layers - 1 << " in that order\n";
  }
  return loads;
}

namespace {

// The names of a balancer enum's name table, for CLI11's IsMember.
template <typename Table>
std::vector<std::string> names_of(const Table& table) {
  std::vector<std::string> names;
  for (const auto& [name, value] : table) names.emplace_back(name);
  return names;
}

void run_plan(const PlanOptions& options) {
  if (options.loads_file.empty() == options.traces.empty()) {
    throw std::invalid_argument("give the loads either with --loads FILE or as TRACE files");
  }
  // From the ranks' summaries where they exist (same numbers), else the traces.
  std::optional<RunInputs> run;
  if (!options.traces.empty()) {
    // The prediction's expert cost comes from the moe.experts spans, which only the full traces
    // hold: read them, not the rank summaries, where a prediction is asked for.
    const bool spans_needed = options.advise || options.rebalance_every > 0;
    run = load_run_inputs(options.traces, options.detail || spans_needed, "plan");
    report_load_errors(run->model, "plan", "the given trace(s)");
  }
  const analysis::TraceModel* model = run ? &run->model : nullptr;
  const std::optional<NextWindowScenarios> next_window = next_window_inputs(
      options.next_window, model, !options.current_placement.empty(), options.window_steps);
  // With --next-window the loads shown are the forecast for that window.
  const balancer::ExpertLoads loads = next_window ? next_window->scenarios.front()
                                      : model
                                          ? expert_loads_of_model(*model, options.traces)
                                          : balancer::read_expert_loads_file(options.loads_file);

  balancer::PlacementConfig config;
  config.num_physical_experts = options.num_slots;
  config.num_gpus = options.num_gpus;
  config.num_nodes = options.num_nodes;
  config.num_groups = options.num_groups;
  // Checked against the tables by CLI11 (IsMember) already.
  config.policy = balancer::value_in(balancer::kPlacementPolicyNames, options.policy).value();
  config.refine_packing = !options.greedy_only;
  config.search = balancer::value_in(balancer::kPlacementSearchNames, options.search).value();
  config.search_seed = options.search_seed;
  config.incremental_max_over_mean = options.incremental_bound;
  std::optional<balancer::ExpertPlacement> current;
  if (!options.current_placement.empty()) {
    current = read_current_placement(options.current_placement, loads, options.num_gpus);
  }
  balancer::PlacementSearchReport report;
  balancer::ExpertPlacement plan =
      current ? balancer::plan_expert_placement_incremental(loads, config, *current)
              : balancer::plan_expert_placement(loads, config, &report);
  if (next_window) {  // the search's proof was for the plan of the forecast alone
    plan = balancer::plan_for_next_window(next_window->scenarios, config);
    std::fill(report.proven_optimal.begin(), report.proven_optimal.end(), uint8_t{0});
  }

  std::vector<LayerBalance> balances(static_cast<size_t>(plan.num_layers));
  if (current) {
    // Renumbered to keep experts on their GPU, so the output is a drop-in next placement.
    const int nodes =
        plan.policy == balancer::PlacementPolicy::kHierarchical ? options.num_nodes : 1;
    balancer::ExpertMigration migration = balancer::plan_expert_migration(*current, plan, nodes);
    plan = std::move(migration.placement);
    for (const balancer::ExpertMove& move : migration.moves) {
      balances[static_cast<size_t>(move.layer)].moves.push_back(move);
    }
    const balancer::ExpertMigration fresh = balancer::plan_expert_migration(
        *current, balancer::plan_expert_placement(loads, config), nodes);
    for (const balancer::ExpertMove& move : fresh.moves) {
      ++balances[static_cast<size_t>(move.layer)].fresh_plan_copies;
    }
    for (int layer = 0; layer < plan.num_layers; ++layer) {
      balances[static_cast<size_t>(layer)].fresh_plan_max_over_mean =
          balancer::summarize_gpu_loads(
              balancer::gpu_loads_of_placement(loads.layer(layer), fresh.placement, layer))
              .max_over_mean();
    }
  }
  for (int layer = 0; layer < plan.num_layers; ++layer) {
    LayerBalance& balance = balances[static_cast<size_t>(layer)];
    balance.gpu_loads_before =
        current ? balancer::gpu_loads_of_placement(loads.layer(layer), *current, layer)
                : balancer::gpu_loads_without_replicas(loads.layer(layer), plan.num_gpus);
    balance.gpu_loads_after = balancer::gpu_loads_of_placement(loads.layer(layer), plan, layer);
    balance.before = balancer::summarize_gpu_loads(balance.gpu_loads_before);
    balance.after = balancer::summarize_gpu_loads(balance.gpu_loads_after);
    if (!current) {
      balance.proven_optimal = report.proven_optimal[static_cast<size_t>(layer)] != 0;
      balance.lower_bound = report.lower_bound[static_cast<size_t>(layer)];
    }
  }

  // From a trace: what this placement would save, from the expert cost measured there.
  std::optional<analysis::PlacementPrediction> prediction;
  std::string no_prediction;
  std::optional<balancer::RebalanceReplay> replay;
  // The run's time breakdown: the summaries' where they hold it, else computed once here for
  // both the replay (its step times) and the prediction.
  std::optional<analysis::TimeBreakdown> computed_breakdown;
  const analysis::TimeBreakdown* breakdown = run->breakdown_or_null();
  if (options.rebalance_every > 0) {
    if (!model) throw std::invalid_argument("--rebalance-every needs TRACE files");
    if (!breakdown)
      breakdown = &computed_breakdown.emplace(analysis::compute_time_breakdown(*model));
    replay = replay_recorded_run(*model, *breakdown, options);
  }
  if (model) {
    std::vector<std::vector<double>> gpu_loads_after;
    for (const LayerBalance& balance : balances) gpu_loads_after.push_back(balance.gpu_loads_after);
    // With --rebalance-every: each GPU's rows under the placement the replay holds at each step.
    for (size_t layer = 0; replay && layer < replay->layers.size(); ++layer) {
      if (!replay->layers[layer].mean_gpu_rows.empty()) {
        gpu_loads_after[layer] = replay->layers[layer].mean_gpu_rows;
      }
    }
    size_t copies = 0;
    for (const LayerBalance& balance : balances) copies += balance.moves.size();
    ChangeCostOptions cost_options;
    cost_options.expert_bytes = options.expert_bytes;
    cost_options.moved_tensors = options.moved_tensors;
    cost_options.window_steps = options.window_steps;
    cost_options.static_placement = options.static_placement;
    cost_options.replica_sync_collectives = options.replica_sync_collectives;
    cost_options.rebalancer_collectives = options.rebalancer_collectives;
    cost_options.num_nodes = options.num_nodes;
    analysis::PlacementChangeCosts costs =
        placement_change_costs(cost_options, plan, current, copies, loads.num_experts);
    // The busiest GPU of each recorded step under the plan, not of the mean loads; with
    // --rebalance-every under the placement the replayed rebalancer holds at that step.
    std::vector<double> busiest_after = mean_busiest_gpu_rows(*model, plan, options.skip_steps);
    if (replay) {
      count_replay_costs(*replay, costs);
      busiest_after.clear();
      for (const balancer::ReplayedLayer& layer : replay->layers) {
        busiest_after.push_back(layer.mean_busiest_rows);
      }
    }
    try {
      prediction =
          analysis::predict_placement(*model, gpu_loads_after, options.skip_steps, breakdown,
                                      &costs, busiest_after.empty() ? nullptr : &busiest_after);
    } catch (const std::invalid_argument& error) {
      no_prediction = error.what();
    }
  }
  std::optional<analysis::RebalanceAdvice> advice;
  if (options.advise && prediction) advice = analysis::advise_rebalance(*prediction);
  if (options.advise && !prediction && no_prediction.empty()) {
    no_prediction = "--advise needs TRACE files (the costs are fitted from them)";
  }
  auto print_all = [&](bool with_slots) {
    if (next_window) std::cout << next_window_note(*next_window, options.window_steps) << "\n";
    if (replay) std::cout << replay_note(*replay, options) << "\n";
    print_placement(std::cout, options, plan, balances, with_slots);
    if (prediction) print_prediction(std::cout, *prediction, options.expert_bytes > 0);
    if (advice) print_advice(std::cout, *advice);
    if (!no_prediction.empty()) std::cout << "no prediction: " << no_prediction << "\n";
  };
  if (options.json_output.empty()) {
    print_all(/*with_slots=*/true);
    return;
  }
  const std::string json = placement_json(options, plan, balances, prediction, advice);
  write_command_output(json, options.json_output);
  if (options.json_output == "-") return;  // stdout holds the JSON alone
  print_all(/*with_slots=*/false);
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
      ->check(CLI::IsMember(names_of(balancer::kPlacementPolicyNames)));
  plan->add_flag("--greedy", options->greedy_only,
                 "greedy balanced packing only, exactly as published (no swap refinement, no "
                 "search)");
  plan->add_option("--search", options->search,
                   "after the greedy plan: none, auto (default: exact search on small layers, a "
                   "bounded local search on large ones) or exhaustive (exact search with a large "
                   "budget; slow on large layers)")
      ->check(CLI::IsMember(names_of(balancer::kPlacementSearchNames)));
  plan->add_option("--search-seed", options->search_seed,
                   "seed of the search's random moves (default 0; same seed, same plan)");
  plan->add_option("--current", options->current_placement,
                   "plan incrementally from this placement (a JSON written by --json): experts "
                   "stay on their GPU where balance allows; prints the expert copies needed");
  plan->add_option("--bound", options->incremental_bound,
                   "with --current: keep experts in place while max/mean per GPU stays at or "
                   "below this (default 1.02)")
      ->check(CLI::Range(1.0, 1000.0));
  plan->add_option("--skip-steps", options->skip_steps,
                   "from traces: warm-up steps the predicted gain leaves out (default 1)");
  plan->add_option("--expert-bytes", options->expert_bytes,
                   "from traces: bytes of one expert's weights (its gradient is as large), for "
                   "the replicas' gradient all-reduce and the migration in the predicted step time")
      ->check(CLI::NonNegativeNumber);
  plan->add_option("--moved-tensors", options->moved_tensors,
                   "tensors of one expert's size a migration moves (default 4: weights, gradient, "
                   "Adam's two moments)")
      ->check(CLI::Range(1.0, 64.0));
  plan->add_option("--tensors-per-expert", options->tensors_per_expert,
                   "with --rebalance-every: weight tensors one expert is stored in (default 1; "
                   "moe_train: 2, w_gate_up and w_down); a migration makes one all-to-all per "
                   "tensor it moves, which is what its time is predicted from")
      ->check(CLI::Range(1, 64));
  plan->add_option("--window", options->window_steps,
                   "steps the placement is kept (the rebalance interval, default 50): the "
                   "migration's one-off time is spread over them")
      ->check(CLI::Range(1.0, 1e9));
  plan->add_flag("--static", options->static_placement,
                 "the placement is applied once, with no runtime rebalancer: its decisions do "
                 "not count");
  plan->add_option("--replica-sync-collectives", options->replica_sync_collectives,
                   "all-reduces a layer's first replica adds per step (default 0: the loop sums "
                   "the replicas' gradients in its gradient all-reduce, as moe_train and "
                   "moescope.runtime.ExpertBalancer do; 1: MoELayer::sync_replica_gradients "
                   "per layer)")
      ->check(CLI::Range(0, 16));
  plan->add_option("--rebalancer-collectives", options->rebalancer_collectives,
                   "all-reduces of its own the rebalancer makes per step (default 0: its loads "
                   "ride on the step's statistics, as in moe_train and ExpertBalancer; 1: "
                   "ExpertRebalancer::after_step)")
      ->check(CLI::Range(0, 16));
  plan->add_flag("--next-window", options->next_window,
                 "from traces: plan for the next --window steps, by the expected max/mean over "
                 "the load forecast and its recent errors, instead of the recorded mean loads");
  plan->add_option("--rebalance-every", options->rebalance_every,
                   "from traces: predict a run whose runtime rebalancer re-plans every N steps "
                   "(its decisions replayed on the recorded loads, judged by the cost rule with "
                   "the rates fitted from the traces) instead of this placement applied once")
      ->check(CLI::PositiveNumber);
  plan->add_option("--rebalance-threshold", options->rebalance_threshold,
                   "with --rebalance-every: the rebalancer's forecast max/mean above which it "
                   "plans (default 1.10, moe_train's)")
      ->check(CLI::Range(1.0, 1e9));
  plan->add_option("--rebalance-rule", options->rebalance_rule,
                   "with --rebalance-every: the rule the run decides by, as moe_train's "
                   "--rebalance-rule: net (the cost rule, default) or imbalance (the mean step "
                   "time x the imbalance removed x the interval against bytes / "
                   "--transfer-bandwidth)")
      ->check(CLI::IsMember({"net", "imbalance"}));
  plan->add_option("--transfer-bandwidth", options->transfer_bandwidth,
                   "with --rebalance-rule imbalance: bytes/s it assumes a migration moves "
                   "(default 1e10, RebalancerOptions::transfer_bytes_per_second's)")
      ->check(CLI::PositiveNumber);
  plan->add_flag("--advise", options->advise,
                 "from traces: say whether the change pays over the window (the steps' predicted "
                 "gain beats the move's cost) and record it as \"advice\" in --json");
  plan->add_option("--json", options->json_output,
                   "write the placement as JSON to this file ('-' for stdout)");
  CLI::Option* loads_option = plan->add_option(
      "--loads", options->loads_file,
      "JSON ([[...], ...] layers x experts, or {\"loads\": ...}) or CSV (one layer per row)");
  CLI::Option* traces_option = plan->add_option("traces", options->traces,
                                                ".moetrace files (or their .moesummary, or a run's "
                                                "folder) to read the expert loads from; their rank "
                                                "summaries are read where they exist");
  add_detail_flag(*plan, options->detail);
  loads_option->excludes(traces_option);
  plan->callback([options] { run_reporting_errors("plan", [&] { run_plan(*options); }); });
}

}  // namespace moescope::cli
