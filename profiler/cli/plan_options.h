// What `moescope plan` was asked for (its command line) and what it found per layer: shared by
// the command (plan_command.cpp) and its text and JSON output (plan_placement_output.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "moescope/balancer/expert_migration.h"
#include "moescope/balancer/expert_placement.h"

namespace moescope::cli {

struct PlanOptions {
  int num_gpus = 0;
  int num_slots = 0;
  int num_nodes = 1;
  int num_groups = 1;
  std::string policy = "auto";
  bool greedy_only = false;
  std::string search = "auto";
  uint64_t search_seed = 0;
  std::string loads_file;
  std::vector<std::string> traces;
  std::string json_output;
  std::string current_placement;  // JSON from --json: plan incrementally from it
  double incremental_bound = 1.02;
  size_t skip_steps = 1;  // warm-up steps the prediction leaves out
  bool detail = false;    // the full traces even where rank summaries exist
  // The step cost terms besides expert compute (step_cost_terms.h).
  double expert_bytes = 0;
  double moved_tensors = 4;
  int tensors_per_expert = 1;  // weight tensors one expert is stored in (one all-to-all each)
  double window_steps = 50;
  bool advise = false;
  bool static_placement = false;     // applied once: no rebalancer's own time per step
  int replica_sync_collectives = 0;  // all-reduces a layer's first replica adds per step
  int rebalancer_collectives = 0;    // the rebalancer's own all-reduces per step
  bool next_window = false;          // plan for the next --window steps (plan_next_window.h)
  // Predict the runtime rebalancer re-planning every N steps (plan_replay.h); 0: one placement.
  int64_t rebalance_every = 0;
  double rebalance_threshold = 1.10;   // its RebalancerOptions::imbalance_threshold
  std::string rebalance_rule = "net";  // net (the cost rule) or imbalance (RebalancerOptions::rule)
  double transfer_bandwidth = 10e9;    // bytes/s the imbalance rule assumes a migration moves
};

struct LayerBalance {
  std::vector<double> gpu_loads_before;  // identity placement, or the current one with --current
  std::vector<double> gpu_loads_after;
  // With --current: the copies the plan needs, and what a fresh plan would need and reach.
  std::vector<balancer::ExpertMove> moves;
  size_t fresh_plan_copies = 0;
  double fresh_plan_max_over_mean = 0.0;
  balancer::GpuLoadBalance before;
  balancer::GpuLoadBalance after;
  // Fresh plans: no plan has a lower maximum (the search proved it), and a lower bound on it.
  bool proven_optimal = false;
  double lower_bound = 0.0;
};

}  // namespace moescope::cli
