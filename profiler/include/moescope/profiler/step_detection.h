// Training steps per rank. From the runtime's step markers (moescope_step) when present: a step
// runs from its marker to the next one; the last ends with the last activity that started in
// it. Otherwise from a repeating top-level CPU range (NVTX "train_step", Kineto
// "ProfilerStep#N"): trailing digits are ignored when names are compared, and the name whose
// occurrences cover the most time (at least 2 per rank) is taken.
#pragma once

#include "moescope/profiler/trace_model.h"

namespace moescope::analysis {

// Fills ProcessTrack::steps of every process and model.step_source.
void detect_steps(TraceModel& model);

// Index in process.steps of the step containing `time`, or -1.
int step_at(const ProcessTrack& process, TimeNs time);

}  // namespace moescope::analysis
