// The expert compute of each MoE layer forward, measured directly: the runtime's "moe.experts"
// span (its grouped expert GEMMs, runtime/moe_instrumentation.h) against the rows that rank
// received for that layer at that step (RECEIVED expert loads). The runtime's rebalancer fits
// the same line from its own timings (runtime/layer_cost_samples.h); a step's cost per row is
// the slope x the passes over the rows (forward + backward, kExpertComputePasses).
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// Forward + backward, the backward about twice the forward (its two GEMMs per weight): the
// runtime's RebalancerOptions::compute_passes_per_step.
inline constexpr double kExpertComputePasses = 3.0;

struct ExpertComputeSample {
  int64_t step = 0;
  int32_t rank = 0;
  uint32_t layer = 0;
  double rows = 0;  // received by the rank for the layer at the step
  double ms = 0;    // the layer forward's moe.experts span
};

// Sorted by (step, rank, layer). A rank's k-th moe.experts span of a step is the forward of the
// k-th layer (by id) with rows that step; a step whose span count differs from its layer count
// (a capture that started mid-step, recomputed forwards) is left out. Empty without moe.experts
// spans (rank summaries, traces of other tools).
std::vector<ExpertComputeSample> expert_compute_samples(const TraceModel& model);

}  // namespace moescope::analysis
