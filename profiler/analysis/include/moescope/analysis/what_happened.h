// "What happened": the first section of `moescope report` on flight-recorder dumps
// (docs/flight-recorder.md), and on any recording whose ranks' traces end inside a collective
// (a hung job that was stopped: the same per-rank story without a trigger). From the trigger
// records (ProcessTrack::triggers) and what each process's dump metadata says about its
// collectives, it tells which trigger fired where, what every rank was doing (the last completed
// and the open collective per communicator, the open spans per thread, the Python stacks), how long
// each rank had made no progress, and which ranks never entered the collective the others wait in
// (as PyTorch Flight Recorder's analyzer does for NCCL).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/collective_mismatch.h"
#include "moescope/analysis/report.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

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

struct WhatHappened {
  // Some process holds a trigger record (a flight-recorder dump), or, in a regular recording,
  // some rank's trace ends inside a collective (first_rank is then -1).
  bool any = false;
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
// "all_reduce #5 of comm 00000000000000ab: rank 1 never entered it; ranks 0, 2 wait in it".
std::string mismatch_line(const CollectiveMismatch& mismatch);
// One line for a first screen (the viewer's summary): the trigger, or that the traces end inside
// a collective, then the first collective some ranks wait in; "" when !what.any.
std::string what_happened_headline(const WhatHappened& what);

}  // namespace moescope::analysis
