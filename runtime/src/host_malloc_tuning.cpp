#include "moescope/runtime/host_malloc_tuning.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace moescope::runtime {

void tune_glibc_malloc_for_training() {
#if defined(__GLIBC__)
  // 32 MB is the largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

}  // namespace moescope::runtime
