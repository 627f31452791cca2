// When a recording was made: the offset from a process's trace times to unix time, as far as its
// file tells. Internal to the analysis library (input checks, clock alignment, summaries).
#pragma once

#include <optional>
#include <utility>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// A .moetrace's clock pair: start_unix_ns - start_ns of its metadata (saturating: hostile values
// at the int64 limits give an offset clock alignment refuses); nullopt without one.
std::optional<TimeNs> moetrace_unix_offset(const ProcessTrack& process);

// [begin, end] of the recording in unix ns (saturating), where the file tells it: a .moetrace by
// its clock pair; a Kineto trace by its baseTimeNanoseconds (the unix time its ts count from),
// or by its timestamps where they are unix times already (older torch.profiler).
std::optional<std::pair<TimeNs, TimeNs>> recorded_wall_range(const ProcessTrack& process);

}  // namespace moescope::analysis
