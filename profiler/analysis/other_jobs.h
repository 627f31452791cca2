// Files of two jobs are never read as one run (internal to the analysis library). The ranks of
// one job share a world size, no two of them state one rank at different times, and they are
// recorded together. Read as one run, two runs would be laid on one timeline (years long, for
// runs a year apart) and compared rank by rank.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

// When a recording was made, [begin, end] in unix ns, where its file says (recording_clock.h).
using WallRange = std::optional<std::pair<TimeNs, TimeNs>>;

// A process offered as a rank of one run.
struct OfferedRank {
  const ProcessTrack* process = nullptr;
  int32_t stated_rank = -1;  // the rank its file states, -1 when none
  std::string file;          // the trace it stands for, named in messages
  WallRange wall;            // recorded_wall_range(*process)
};

// `process` offered as a rank, with its wall range read from its file's metadata.
OfferedRank offered_rank(const ProcessTrack& process, int32_t stated_rank, std::string file);

struct OtherJobRank {
  size_t index = 0;     // into the offered ranks
  std::string message;  // "refused: ...": why, naming the first rank's file, and what to do
};

// The offered ranks that are not of the first one's job, in order. A rank refused here no
// longer counts for the ranks after it.
std::vector<OtherJobRank> ranks_of_other_jobs(const std::vector<OfferedRank>& offered);

}  // namespace moescope::analysis
