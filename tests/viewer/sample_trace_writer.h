// Writes synthetic multi-rank MoE traces with the trace writer, for the viewer's tests and
// benchmark: per rank and step, nested CPU spans (step > layer > phases), kernel launches and
// their GPU kernels, all-to-all dispatch/combine with split sizes, expert loads with one hot
// expert, predicted loads, a rebalancing decision, memory allocations and a counter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::viewer::testing {

struct SampleTraceShape {
  int num_ranks = 2;
  int num_steps = 6;
  int num_layers = 4;
  int num_experts = 16;
  int kernels_per_layer = 3;  // per phase "experts": grouped GEMM pieces
  int hot_layer = 2;          // this layer's ...
  int hot_expert = 11;        // ... expert gets several times the tokens of the others
  int64_t step_ns = 2'000'000;
  uint64_t seed = 1;
};

struct SampleTrace {
  std::vector<std::string> files;  // one per rank
  uint64_t timeline_events = 0;    // spans + kernels + comm ops written
};

// Writes `directory`/sample.<rank>.moetrace for every rank. Throws std::runtime_error when a
// file cannot be written.
SampleTrace write_sample_trace(const std::string& directory, const SampleTraceShape& shape);

}  // namespace moescope::viewer::testing
