// Writes synthetic multi-rank MoE training traces with the trace writer, with problems planted
// on request, so tests know exactly what the analysis must find.
//
// Per rank and step (GPU style, one host): a step marker; per layer the CPU spans moe.layer >
// moe.route / moe.dispatch_a2a / moe.experts / moe.combine_a2a, kernels on stream 7 (router,
// shared MLP overlapping each all-to-all, grouped expert GEMM) launched early by
// cudaLaunchKernel calls, NCCL all-to-all kernels on stream 13 with all-to-all comm ops
// (splits); an optimizer kernel; two activation allocations freed at the step end; expert
// loads (LOCAL scope, per rank) and layer statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::testing {

inline constexpr int64_t kMs = 1000000;  // ns

struct SyntheticOptions {
  int num_ranks = 2;
  int num_steps = 6;
  int num_layers = 2;
  int num_experts = 8;
  int tokens_per_expert = 256;  // per rank per step, before skew
  double route_ms = 0.3;
  double expert_ms = 2.0;
  double a2a_ms = 0.4;
  double optimizer_ms = 1.0;
  // Planted problems (off by default).
  int hot_layer = -1, hot_expert = -1;
  double hot_factor = 4.0;
  int slow_rank = -1;
  double slow_factor = 1.6;
  bool unoverlapped_a2a = false;  // no shared MLP under the all-to-all, which takes exposed_a2a_ms
  double exposed_a2a_ms = 3.0;
  bool sync_per_step = false;  // D2H copy of token counts + stream sync of sync_ms per step
  double sync_ms = 3.0;
  int churn_allocations_per_step = 0;
  int nan_step = -1, nan_layer = -1, nan_rank = -1;
  int drop_layer = -1;
  double drop_fraction = 0.0;
  int dead_layer = -1;
  std::vector<int> dead_experts;
  int collapse_layer = -1;      // experts >= 2 fade out over the steps
  int late_launch_kernels = 0;  // per step: tiny kernels each launched after the last ended
  bool predictions = false;     // balancer predicted loads (exact x 1.1) + one rebalance per step
  uint64_t device_memory_bytes = 0;  // written in the metadata when > 0
  bool nasty_names = false;          // a span per step named with quotes, \, control chars, UTF-8
  bool write_step_markers = true;    // else steps come from the "train_step" range
  std::string host_prefix = "node";  // every rank on host "<prefix>0" unless ranks_per_host > 0
  int ranks_per_host = 0;
  int64_t host_clock_skew_ns = 0;  // added to every time of hosts > 0
  bool clock_sync_points = false;
};

// A name with every character class JSON escaping must handle.
std::string nasty_span_name();

// Writes one file per rank as `<directory>/<stem>.<rank>.moetrace`; returns the paths.
std::vector<std::string> write_synthetic_run(const std::string& directory, const std::string& stem,
                                             const SyntheticOptions& options);

std::string test_directory(const std::string& name);

// Path of a helper script in tests/analysis/.
std::string helper_script(const std::string& name);

}  // namespace moescope::testing
