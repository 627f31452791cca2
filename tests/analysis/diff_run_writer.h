// Writes synthetic CPU training runs for `moescope diff` tests: per step and rank the phases
// (forward, backward, optimizer; domain moescope.phase), one module span per MoE layer
// (model.layers.L.mlp; domain moescope.module) followed by an all-to-all that waits for the
// slowest rank, an all-reduce at the end of backward, and expert loads (LOCAL per rank and
// RECEIVED rows per rank). Span durations get Gaussian noise from `seed`, so two runs with
// different seeds differ only by noise; the planted options change one thing by a known amount.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::testing {

struct DiffRunOptions {
  uint64_t seed = 1;
  int num_ranks = 2;
  int num_steps = 30;
  int num_layers = 2;
  int num_experts = 8;          // split contiguously over the ranks
  int tokens_per_expert = 256;  // per rank and step, +-10 uniform jitter
  double noise_ms = 0.2;        // standard deviation of every span's duration
  double layer_ms = 1.0;        // module span time besides the experts
  double ms_per_row = 0.002;    // expert compute cost of one received row
  double a2a_ms = 0.25;
  double backward_ms = 4.0;
  double allreduce_ms = 0.5;
  double optimizer_ms = 1.0;
  uint64_t allreduce_bytes = 64ull << 20;
  // Planted differences.
  double forward_extra_ms = 0;  // forward runs this much longer, after its layers
  int moved_layer = -1;         // on this layer, move a share of expert 1's tokens to expert 0
  double moved_share = 0.0;     //   (same rank, so each rank's rows do not change)
  int hot_layer = -1;           // on this layer, expert 0 gets hot_factor x its tokens
  double hot_factor = 1.0;
  bool balanced_rows = false;  // every rank computes the same rows (a balanced placement)
  // Known communication costs (step cost model tests; 0 keeps the runs above unchanged).
  // All-to-all: after the last rank arrives, a2a_ms + bytes x a2a_ms_per_mib, the bytes (when
  // a2a_ms_per_mib > 0) those of the rows the rank's experts computed (the combine's).
  double a2a_ms_per_mib = 0;
  // All-reduce: when > 0 each costs allreduce_ms + bytes x allreduce_ms_per_mib, and a small
  // one of statistics_bytes follows the gradient's (two sizes: the fit sees both).
  double allreduce_ms_per_mib = 0;
  uint64_t statistics_bytes = 4096;
  int replica_sync_ops = 0;  // more all-reduces per step of replica_sync_bytes (replicas)
  uint64_t replica_sync_bytes = 0;
  // Rebalances: every rebalance_every steps (last step of each window) a migration of
  // migration_bytes x (1 + its index % 3) taking migration_ms + bytes x migration_ms_per_mib,
  // recorded as applied rebalance records (one per layer) and added to that step.
  int rebalance_every = 0;
  uint64_t migration_bytes = 0;
  double migration_ms = 0;
  double migration_ms_per_mib = 0;
};

// One file per rank, `<directory>/<stem>.<rank>.moetrace`; returns the paths.
std::vector<std::string> write_diff_run(const std::string& directory, const std::string& stem,
                                        const DiffRunOptions& options);

}  // namespace moescope::testing
