// The text the timeline shows for an event: its hover tooltip (short form) and the details pane
// of the selection (long form). Plain strings, so tests read what a person would see.
#pragma once

#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"
#include "moescope/viewer/timeline_index.h"

namespace moescope::viewer {

// Lines describing the event at `ref`: name; duration, start (from the trace begin) and track;
// then per kind — spans: depth, domain, never closed (long form: the parent); GPU work: kind,
// correlation id, bytes and GB/s, launch configuration (long form: the launching call and how
// long before the work it came); communication: kind, bytes, GB/s, rank of ranks, peer, time
// from enqueue to transfer (long form: bytes sent to each rank). Empty for an invalid ref.
std::vector<std::string> describe_event(const analysis::TraceModel& model,
                                        const TimelineIndex& index, const EventRef& ref,
                                        bool long_form);

}  // namespace moescope::viewer
