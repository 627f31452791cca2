// What one rank contributes to the report that only its events can tell: the per-step time
// breakdown, the phase split, memory peaks, expert compute time, capture notes and the counts
// that decide whether the run is inference. The report is built from these facts plus the
// small per-rank data every summary keeps (steps, collectives, expert-load samples), so the
// full-trace path (facts computed from the loaded events) and the summary path (facts read from
// rank_summary files) run the same code and give the same numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/memory_analysis.h"
#include "moescope/analysis/run_phases.h"
#include "moescope/analysis/span_time.h"
#include "moescope/analysis/time_breakdown.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct RankFacts {
  RankBreakdown breakdown;
  bool has_steps = false;  // false: breakdown.steps is the whole trace as one step
  RankPhases phases;
  RankMemory memory;
  double expert_ms_per_step = 0;          // GPU kernels (else CPU spans) named *expert*
  std::vector<std::string> capture_gaps;  // notes of what the capture missed, each once
  bool has_phase_domain = false;          // the trace names the domain "moescope.phase"
  uint64_t forward_phase_spans = 0;       // phase spans "forward"
  uint64_t training_phase_spans = 0;      // phase spans "backward" or "optimizer"
  double routed_tokens = 0;               // sum of the counter "moescope.routed_tokens"
  // Time per step in named spans (`moescope diff`'s span rows). Only summaries fill it
  // (summarize_process): on the full-trace path the diff reads the spans themselves.
  std::vector<RankSpanTime> span_time;
};

// One entry per process of `model`, in model order.
std::vector<RankFacts> compute_rank_facts(const TraceModel& model);

// The run's time breakdown from its ranks' facts (facts order): what compute_time_breakdown
// gives on the loaded events, also where only summaries were read.
TimeBreakdown time_breakdown_of_facts(const std::vector<RankFacts>& facts);

// Moves every absolute time of `facts` by `offset` ns (clock alignment of a summary).
void shift_rank_facts(RankFacts& facts, TimeNs offset);

}  // namespace moescope::analysis

namespace moescope::analysis {

// is_inference_run's answer from the ranks' facts (the same rules, one rank at a time).
InferenceSummary inference_from_facts(const TraceModel& model, const std::vector<RankFacts>& facts);

}  // namespace moescope::analysis
