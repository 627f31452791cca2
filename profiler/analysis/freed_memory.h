// Memory of merged parts handed back to the system as a merge goes (internal to the analysis
// library). Files and rank summaries are decoded on worker threads, so each part's memory is
// freed into those threads' malloc arenas while the model's arrays take new pages: a merge of
// thousands of small parts would peak at about twice their size (4,096 ranks: 2.1 GB instead of
// 1.5 for the traces, 1.0 GB instead of 0.8 for the summaries). Large blocks are mappings of
// their own and go back when freed anyway.
#pragma once

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace moescope::analysis {

class FreedMemoryReturn {
 public:
  // One more part was merged and freed.
  void part_freed() {
    if (++freed_ % kPartsPerReturn == 0) give_back();
  }

 private:
  static constexpr size_t kPartsPerReturn = 256;
  static void give_back() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
  size_t freed_ = 0;
};

}  // namespace moescope::analysis
