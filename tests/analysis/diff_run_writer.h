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
};

// One file per rank, `<directory>/<stem>.<rank>.moetrace`; returns the paths.
std::vector<std::string> write_diff_run(const std::string& directory, const std::string& stem,
                                        const DiffRunOptions& options);

}  // namespace moescope::testing
