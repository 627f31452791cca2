// Which collective a hung job waits in, and which ranks never entered it (as PyTorch Flight
// Recorder's analyzer does for NCCL): per rank and communicator the last completed collective
// and the one still open, then per communicator the latest collective some rank is inside.
// A flight-recorder dump has them in its metadata (what_happened.h); any other trace has them
// from its ops and its `collective_open` records (the recorder writes one for a collective
// still open a second after it was entered), which `moescope top` reads while the job runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct CollectiveState {
  uint64_t comm_id = 0;
  int32_t num_ranks = 0;
  bool has_completed = false, has_open = false;
  uint32_t completed_sequence = 0, open_sequence = 0;
  uint32_t completed_kind = 0, open_kind = 0;
  uint64_t completed_bytes = 0, open_bytes = 0;
  double open_for_s = 0;    // entered this long before the dump (or the trace's end)
  TimeNs open_entered = 0;  // when it was entered, on the trace's clock (0 unknown)
};

// One rank's collectives: its rank in the job and a state per communicator.
struct RankCollectives {
  int32_t rank = 0;
  std::vector<CollectiveState> collectives;
};

struct CollectiveMismatch {
  uint64_t comm_id = 0;
  uint32_t sequence = 0;  // the collective some ranks wait in
  uint32_t kind = 0;
  std::vector<int32_t> waiting;        // ranks inside it
  std::vector<int32_t> never_entered;  // ranks that did not reach it
};

// "0, 2-5, 9": ranks in ascending order as runs, at most `max_runs` of them, then ", +N more"
// (a thousand ranks waiting in one collective is one run).
std::string rank_runs(std::vector<int32_t> ranks, size_t max_runs = 8);

// Per communicator some rank is inside a collective of: the latest such collective, the ranks
// inside it and the ranks that never entered it (neither inside nor past it; or, for a
// communicator of as many ranks as `ranks` holds, with nothing of it at all).
std::vector<CollectiveMismatch> collective_mismatches(const std::vector<RankCollectives>& ranks);

// A process's collectives as its trace ends: per communicator the last completed op (one with a
// known end: ops still on the GPU when the recording stopped are written without), and the
// latest collective_open record that no op of the same sequence completed and after which the
// rank started no step (open_for_s measured to `end`, on the trace's clock). Communicators with
// neither are left out.
std::vector<CollectiveState> collectives_at_end(const ProcessTrack& process, TimeNs end);

// Where a process's recording ends: its last event, or its last statistics record if later
// (nothing is written while a rank waits in a collective, but the recorder writes that record
// when the recording stops). What a hung rank's wait is measured to.
TimeNs recording_end(const ProcessTrack& process);

}  // namespace moescope::analysis
