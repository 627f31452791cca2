// What kind of run a trace is and where its step time goes by training phase.
//
// Phases are the spans of domain "moescope.phase" the zero-code capture writes (forward,
// backward, recompute, optimizer; docs/autocapture.md). They nest (recompute inside backward;
// older traces: forward inside backward), so each instant of a step is given to the innermost
// phase span covering it: forward + backward + recompute + optimizer + other = step, exactly.
//
// A run is inference when it has no step markers and no backward or optimizer phase but
// forward phases (torch.no_grad() loops, model.generate()): it is measured in forward passes
// and routed tokens (the counter "moescope.routed_tokens" the capture writes), not steps.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// The phases, in the order the report lists them; "other" is the step time no phase covers.
inline constexpr std::array<const char*, 5> kPhaseNames = {"forward", "backward", "recompute",
                                                           "optimizer", "other"};

struct RankPhases {
  int32_t rank = 0;
  size_t steps = 0;
  double step_ms = 0;                     // mean per step
  std::array<double, 5> phase_ms{};       // mean per step, kPhaseNames order; sums to step_ms
  std::array<uint64_t, 5> phase_spans{};  // spans of each phase in the steps (other: 0)
};

struct PhaseBreakdown {
  bool any = false;               // some process has a phase span inside a step
  std::vector<RankPhases> ranks;  // model process order
};

// Mean time per step of each phase, per rank (steps from step detection).
PhaseBreakdown compute_phase_breakdown(const TraceModel& model);
// One process's part of it, and the breakdown made of such parts (`any` from their spans).
RankPhases compute_rank_phases(const TraceModel& model, const ProcessTrack& process);
PhaseBreakdown phase_breakdown_of(std::vector<RankPhases> ranks);

// Phase spans of one process by kind (is_inference_run's evidence, one rank at a time).
struct PhaseSpanCounts {
  bool has_domain = false;  // the model names the domain "moescope.phase"
  uint64_t forward = 0;     // "forward"
  uint64_t training = 0;    // "backward" or "optimizer"
};
PhaseSpanCounts count_phase_spans(const TraceModel& model, const ProcessTrack& process);

struct InferenceSummary {
  bool inference = false;
  uint64_t forward_passes = 0;  // model forwards (phase spans), every rank
  double routed_tokens = 0;     // tokens routed by the first MoE layer, every rank (0: unknown)
};

// True when the model is an inference run (see above); fills `summary` when given.
bool is_inference_run(const TraceModel& model, InferenceSummary* summary = nullptr);

}  // namespace moescope::analysis
