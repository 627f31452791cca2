// Which rank computed which expert, as the trace shows it: no placement is recorded as such, but
// under expert parallelism each rank writes the rows each of its local experts received
// (RECEIVED expert-load samples, one count per local slot) and the router's tokens per global
// expert (GLOBAL, or LOCAL summed over ranks). A slot hosts expert e when its received rows
// equal e's routed tokens in every step: the summed |difference| over the layer's steps is within
// kPlacementMatchTolerance of e's tokens and no other expert matches as well. A replicated
// expert splits its tokens over slots, so it matches none: its rank stays unknown (-1).
// Without RECEIVED samples (data parallel, or a capture that does not see the dispatch) there is
// no placement: `has_received_rows` is false.
#pragma once

#include <cstdint>
#include <vector>

#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

inline constexpr double kPlacementMatchTolerance = 0.05;

struct LayerPlacementSeen {
  uint32_t layer = 0;
  bool has_received_rows = false;
  std::vector<int32_t> rank_of_expert;  // [num_experts] hosting rank, -1 when not seen
  // Mean rows per step each rank's experts computed: (rank, rows), sorted by rank.
  std::vector<std::pair<int32_t, double>> rows_by_rank;
  // The rank with the most rows (-1 without received rows) and its rows over the others' median.
  int32_t busiest_rank = -1;
  double busiest_excess_rows = 0;
  // The ranks hosting `experts` (unknown ones left out), ascending.
  std::vector<int32_t> hosts_of(const std::vector<uint32_t>& experts) const;
};

LayerPlacementSeen expert_placement_seen(const TraceModel& model, uint32_t layer);

}  // namespace moescope::analysis
