// How the ranks of one run are numbered, for every reader of a run (the traces' loader, the
// rank summaries, `moescope top`): the rank each file states when every file states a distinct
// one, else the files' positions. Internal to the analysis library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moescope::analysis {

struct RankNumbering {
  std::vector<int32_t> ranks;  // per file, in the order given
  // Why the files' positions number the ranks, about `file` and naming the other file ("" when
  // the stated ranks do, or when no file states one: a program that is not distributed).
  std::string file;
  std::string why_by_position;
};

// `stated[i]`: the rank files[i] states, -1 when none. [files.size() == stated.size()]
RankNumbering number_ranks(const std::vector<int32_t>& stated,
                           const std::vector<std::string>& files);

}  // namespace moescope::analysis
