// Ranks from the files' metadata, or from their positions (rank_numbering.h).
#include "rank_numbering.h"

#include <map>

namespace moescope::analysis {

RankNumbering number_ranks(const std::vector<int32_t>& stated,
                           const std::vector<std::string>& files) {
  RankNumbering numbering;
  numbering.ranks = stated;
  std::map<int32_t, size_t> first_stating;
  size_t first_unranked = stated.size();
  for (size_t i = 0; i < stated.size() && numbering.why_by_position.empty(); ++i) {
    if (stated[i] < 0) {
      if (first_unranked == stated.size()) first_unranked = i;
      continue;
    }
    const auto [first, added] = first_stating.try_emplace(stated[i], i);
    if (!added) {
      // Two processes of one job stating one rank: ranks taken from LOCAL_RANK, which repeats
      // on every node.
      numbering.file = files[i];
      numbering.why_by_position = "states rank " + std::to_string(stated[i]) + " as " +
                                  files[first->second] +
                                  " does (a local rank on two nodes?): ranks numbered by file "
                                  "order";
    }
  }
  const bool some_unranked = first_unranked < stated.size();
  if (numbering.why_by_position.empty() && some_unranked && !first_stating.empty()) {
    const size_t ranked = first_stating.begin()->second;
    numbering.file = files[first_unranked];
    numbering.why_by_position = "states no rank, " + files[ranked] + " states rank " +
                                std::to_string(stated[ranked]) + ": ranks numbered by file order";
  }
  if (!numbering.why_by_position.empty() || some_unranked) {
    for (size_t i = 0; i < numbering.ranks.size(); ++i) numbering.ranks[i] = int32_t(i);
  }
  return numbering;
}

}  // namespace moescope::analysis
