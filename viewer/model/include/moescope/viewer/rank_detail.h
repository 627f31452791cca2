// Detail on demand from the job overview: a click on a cell (rank, step) loads that one rank's
// trace (the .moetrace beside its summary) for a window of steps around the step, and the
// existing panels show it. What bounds the memory:
//   - one rank: never more than the clicked rank's trace is loaded;
//   - the window: the clicked step +- kDetailStepsAround; the reader stops shortly after the
//     window's end (at an event count estimated from the summary's event count and time range,
//     with a margin), so steps after the window are not read;
//   - a cap: never more than kDetailMaxEvents events (the reader stops after the chunk that
//     reaches it; about 60-100 bytes an event in the model: well under 1 GB).
// The panels' step range is set to the window and the timeline is fitted to it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "moescope/viewer/job_overview.h"
#include "moescope/viewer/loaded_trace.h"

namespace moescope::viewer {

inline constexpr int64_t kDetailStepsAround = 2;
inline constexpr uint64_t kDetailMaxEvents = 4'000'000;

struct DetailRequest {
  int32_t rank = -1;
  std::string trace;
  int64_t step = 0;                        // the clicked step
  int64_t first_step = 0, last_step = 0;   // the window (of the steps this rank has)
  uint64_t max_events = kDetailMaxEvents;  // the reader's stop
  std::string error;  // non-empty: nothing to load (no trace beside the summary), and why
};

// The request for a click on the cell (row, column) of `overview` (indices into rows, steps).
DetailRequest detail_request_for(const JobOverview& overview, size_t row, size_t column);

// Loads what `request` asks for (on the calling thread): the rank's trace up to the window's
// end, indexed for the timeline. Should the estimate stop short of the window's end, it reads
// again up to the cap. Read problems are in the model's errors, as for any trace.
std::unique_ptr<LoadedTrace> load_rank_detail(const DetailRequest& request);

// The window's time range in `detail` (for the timeline's focus): the start of its first step
// to the end of its last step found in the trace; false when the trace has none of them.
bool detail_window_range(const LoadedTrace& detail, const DetailRequest& request, double& begin_ns,
                         double& end_ns);

}  // namespace moescope::viewer
