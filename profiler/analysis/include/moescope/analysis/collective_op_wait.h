// Wait vs transfer of each collective op on each rank, for drawing it: the split
// collective_wait.h sums per step, here per op, so the timeline shades the part of an op spent
// waiting for the last rank to arrive (same matching, same clamp).
#pragma once

#include <cstddef>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct CollectiveOpWaits {
  // [process][communicator][op] (model order): ns this rank's copy waited; -1 where the op is
  // not matched across the ranks.
  std::vector<std::vector<std::vector<TimeNs>>> wait_ns;
  // -1 for an unmatched op or indices out of range.
  TimeNs wait(size_t process, size_t communicator, size_t op) const;
};

CollectiveOpWaits collective_op_waits(const TraceModel& model);

}  // namespace moescope::analysis
