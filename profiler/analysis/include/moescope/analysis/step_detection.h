// Training steps per rank, from the first source present (StepSource):
//  1. step markers (moescope_step, moescope_step_end: the runtime, the annotation module, the
//     zero-code capture): a step runs from its marker to its end marker, else to the next start,
//     else to the last activity that started in it;
//  2. torch.profiler's "ProfilerStep#N" ranges, numbered as torch numbered them;
//  3. PyTorch's "Optimizer.step#<Class>.step" ranges (a program that never calls prof.step()):
//     each step ends with one optimizer step of the most frequent class;
//  4. a guess: the repeating top-level CPU range (NVTX "train_step") whose occurrences cover the
//     most time, at least 2 per rank; trailing digits are ignored when names are compared.
// Then samples recorded without a step number (step < 0) get the step in progress at their time.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// Fills ProcessTrack::steps of every process and model.step_source.
void detect_steps(TraceModel& model);

// Index in process.steps of the step containing `time`, or -1.
int step_at(const ProcessTrack& process, TimeNs time);

// The steps and rank one number covers: `moescope report` passes {} (everything), the viewer's
// panels their step range and rank filter. Steps are inclusive; -1 = unbounded / every rank.
struct StepRankFilter {
  int64_t step_first = -1;
  int64_t step_last = -1;
  int32_t rank = -1;
  bool has_step(int64_t step) const {
    return (step_first < 0 || step >= step_first) && (step_last < 0 || step <= step_last);
  }
  bool has_rank(int32_t candidate) const { return rank < 0 || candidate == rank; }
  bool covers_every_step() const { return step_first < 0 && step_last < 0; }
  bool operator==(const StepRankFilter&) const = default;
};

// Steps present in the trace (from step intervals, else from expert-load samples), ascending.
std::vector<int64_t> known_steps(const TraceModel& model);

// Time window [begin, end] of the filter's steps on `process`; the model's whole range when
// the filter covers every step or the process has none of its steps.
struct TimeWindow {
  TimeNs begin = 0, end = 0;
  bool contains(TimeNs time) const { return time >= begin && time <= end; }
};
TimeWindow step_window(const TraceModel& model, const ProcessTrack& process,
                       const StepRankFilter& filter);

}  // namespace moescope::analysis
