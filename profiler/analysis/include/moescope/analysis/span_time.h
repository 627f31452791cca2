// Time per step in named CPU spans: the phases of the zero-code capture (domain
// `moescope.phase`: forward, backward, optimizer), its module spans (`moescope.module`), the
// runtime's spans (`moescope`: moe.route, moe.experts, ...) and the program's own ranges.
//
// Per rank and step: the summed duration of the spans with that (domain, name) that start in
// the step (a span inside another of the same name is not counted twice); per step: the mean
// over the ranks that have the step (a rank without such a span counts 0). Names ending in
// "#<digits>" are compared without the digits (ProfilerStep#12 -> ProfilerStep#).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

inline constexpr const char* kPhaseDomain = "moescope.phase";
inline constexpr const char* kModuleDomain = "moescope.module";

struct SpanStepTime {
  std::string domain;
  std::string name;
  std::vector<int64_t> steps;       // every step of the run (known_steps), ascending
  std::vector<double> ms_per_step;  // [steps] mean over ranks
  double total_ms = 0;              // summed over ranks and steps
};

// One entry per (domain, name) with at least one span inside a step, sorted by total_ms
// (largest first). Empty when the run has no steps.
std::vector<SpanStepTime> span_time_per_step(const TraceModel& model);

// One rank's part of it: per (domain, name), the summed duration per step of the spans that
// start in that step (rank summaries keep it; their model has no spans).
struct RankSpanTime {
  std::string domain;
  std::string name;            // without a "#<digits>" step number
  std::vector<int64_t> steps;  // ascending, steps with such a span
  std::vector<double> ms;      // [steps]
};
std::vector<RankSpanTime> rank_span_time(const TraceModel& model, const ProcessTrack& process);

// span_time_per_step from the ranks' parts: `ranks[i]` is model.processes[i]'s (span_time_per_step
// is this over rank_span_time of every process, so both give the same numbers).
std::vector<SpanStepTime> span_time_of_ranks(
    const TraceModel& model, const std::vector<const std::vector<RankSpanTime>*>& ranks);

}  // namespace moescope::analysis
