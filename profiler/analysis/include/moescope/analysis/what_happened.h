// "What happened": the first section of `moescope report` on flight-recorder dumps
// (docs/flight-recorder.md). From the trigger records (ProcessTrack::triggers) and what each
// process's dump metadata says about its collectives, it tells which trigger fired where, what
// every rank was doing (the last completed and the open collective per communicator, the open
// spans per thread, the Python stacks), how long each rank had made no progress, and which
// ranks never entered the collective the others wait in (as PyTorch Flight Recorder's analyzer
// does for NCCL).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct CollectiveState {
  uint64_t comm_id = 0;
  int32_t num_ranks = 0;
  bool has_completed = false, has_open = false;
  uint32_t completed_sequence = 0, open_sequence = 0;
  uint32_t completed_kind = 0, open_kind = 0;
  uint64_t completed_bytes = 0, open_bytes = 0;
  double open_for_s = 0;  // entered this long before the dump
};

struct RankStory {
  int32_t rank = 0;
  int64_t pid = 0;
  std::string file;
  std::vector<TriggerEvent> triggers;
  uint32_t origin_reason = 0;    // a peer dump: what the origin saw
  double since_progress_s = -1;  // -1 unknown
  std::vector<CollectiveState> collectives;
  std::vector<std::string> open_spans;  // per thread: "thread: outer > inner"
  std::string python_stacks;
};

struct CollectiveMismatch {
  uint64_t comm_id = 0;
  uint32_t sequence = 0;  // the collective some ranks wait in
  uint32_t kind = 0;
  std::vector<int32_t> waiting;        // ranks inside it
  std::vector<int32_t> never_entered;  // ranks that did not reach it
};

struct WhatHappened {
  bool any = false;    // some process holds a trigger record (a flight-recorder dump)
  TriggerEvent first;  // the earliest trigger that is not "peer" (else the earliest)
  int32_t first_rank = -1;
  std::string first_detail;
  std::vector<RankStory> ranks;
  std::vector<CollectiveMismatch> mismatches;
};

WhatHappened explain_dump(const TraceModel& model);
// Text or markdown, ending with a blank line; "" when !what.any.
std::string render_what_happened(const WhatHappened& what, ReportFormat format);
// The same as a JSON object (a string), "null" when !what.any.
std::string what_happened_json(const WhatHappened& what);

}  // namespace moescope::analysis
