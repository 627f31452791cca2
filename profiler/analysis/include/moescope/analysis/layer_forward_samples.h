// What each MoE layer forward of the runtime measured, from its trace: its "moe.experts" span
// (the grouped expert GEMMs, runtime/moe_instrumentation.h) and its "a2a.dispatch" all-to-all,
// against the rows that rank received for that layer at that step (RECEIVED expert loads). The
// runtime's rebalancer fits the same lines from its own timings (runtime/layer_cost_samples.h);
// a step's cost per row is the experts' slope x the passes over the rows (forward + backward,
// kExpertComputePasses).
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// Forward + backward, the backward about twice the forward (its two GEMMs per weight): the
// runtime's RebalancerOptions::compute_passes_per_step.
inline constexpr double kExpertComputePasses = 3.0;

struct LayerForwardSample {
  int64_t step = 0;
  int32_t rank = 0;
  uint32_t layer = 0;
  double rows = 0;          // received by the rank for the layer at the step
  double experts_ms = 0;    // the forward's moe.experts span
  double dispatch_ms = -1;  // its a2a.dispatch all-to-all; -1: not recorded (one process)
  // The rank's own work between the layer's all-to-alls, forward (a2a.dispatch's end to
  // a2a.combine's start) plus backward (a2a.combine.backward's end to a2a.dispatch.backward's
  // start): what a step waits for on the busiest rank at each of them. -1: not recorded.
  double between_all_to_alls_ms = -1;
};

// Sorted by (step, rank, layer). A rank's k-th moe.experts span (a2a.dispatch, a2a.combine op)
// of a step is the forward of the k-th layer (by id) with rows that step, its k-th backward op
// that of the k-th layer from the last; a step whose span count differs from its layer count (a
// capture that started mid-step, recomputed forwards) is left out, and so are the all-to-all
// times of a step whose op counts differ. Empty without moe.experts spans
// (rank summaries, traces of other tools).
std::vector<LayerForwardSample> layer_forward_samples(const TraceModel& model);

}  // namespace moescope::analysis
