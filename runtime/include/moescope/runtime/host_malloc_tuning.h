// glibc malloc settings for a LibTorch training process on CPU.
#pragma once

namespace moescope::runtime {

/// Fixes glibc's mmap threshold at 32 MB and its trim threshold at 512 MB, as running under
/// tcmalloc or jemalloc would. glibc's dynamic thresholds hand a training step's short-lived
/// 0.1-32 MB tensors back to the system and fault them in again the next step (page faults were
/// most of the recorder's apparent overhead on moe_train; docs/performance.md). Call it first in
/// main(), before any large allocation; a no-op where the C library is not glibc.
void tune_glibc_malloc_for_training();

}  // namespace moescope::runtime
