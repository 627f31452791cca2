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

// Any trace: a .moetrace's clock pair; a Kineto trace's baseTimeNanoseconds (the unix time its ts
// count from), or 0 where its timestamps are unix times already (older torch.profiler).
std::optional<TimeNs> unix_offset(const ProcessTrack& process);

// [begin, end] of the recording in unix ns, where unix_offset is known.
std::optional<std::pair<TimeNs, TimeNs>> recorded_wall_range(const ProcessTrack& process);

}  // namespace moescope::analysis
