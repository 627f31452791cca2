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

#include "moescope/profiler/trace_model.h"

namespace moescope::analysis {

// Fills ProcessTrack::steps of every process and model.step_source.
void detect_steps(TraceModel& model);

// Index in process.steps of the step containing `time`, or -1.
int step_at(const ProcessTrack& process, TimeNs time);

}  // namespace moescope::analysis
