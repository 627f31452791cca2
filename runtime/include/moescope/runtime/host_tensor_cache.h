// HostTensorCache: large CPU tensors kept and handed out again, step after step.
//
// On the GPU, LibTorch's caching allocator keeps freed blocks for the next step. On the CPU
// there is none: every [R, 2F] pre-activation or gradient of the experts (tens of MB) is a fresh
// mmap that the kernel faults in page by page and returns when it is freed, every step. On the
// 2-core CI VM that cost a fifth of a CPU MoE step (docs/performance.md, "MoE layer (CPU)").
// The experts take those tensors from this cache instead.
//
// A cached block is a 1-D byte tensor; empty() hands out a typed view of its first bytes. A
// block is free again when nothing but the cache references its storage (the view and every
// tensor viewing it, e.g. autograd's saved copies, are gone), so a block saved for a backward
// that has not run yet is never handed out twice. Requests below min_bytes go to at::empty.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace moescope::runtime {

/// HostTensorCache::experts()' cap on cached bytes.
inline constexpr int64_t kDefaultExpertsCacheBytes = int64_t{2} << 30;
/// HostTensorCache::experts()' smallest cached request. glibc serves smaller blocks from its heap
/// after the first steps (its mmap threshold rises to at most 32 MiB), so only larger ones are
/// faulted in afresh each step; caching small ones cost moe_train's tiny layers ~3% per step.
inline constexpr int64_t kExpertsCacheMinBytes = int64_t{16} << 20;

struct HostTensorCacheStats {
  int64_t hits = 0;           // requests served from a free cached block
  int64_t misses = 0;         // requests that allocated a new cached block
  int64_t uncached = 0;       // requests past the byte cap or below min_bytes (plain at::empty)
  int64_t cached_bytes = 0;   // bytes held in blocks now
  int64_t cached_blocks = 0;  // blocks held now
};

class HostTensorCache {
 public:
  /// Holds at most max_cached_bytes in blocks; requests under min_bytes are not cached.
  explicit HostTensorCache(int64_t max_cached_bytes, int64_t min_bytes = 1 << 20);

  /// An uninitialized contiguous CPU tensor [sizes] of dtype, from the smallest free block that
  /// fits, or from a new block of the request's size plus 1/8 (so that a slightly larger request
  /// next step still fits).
  at::Tensor empty(at::IntArrayRef sizes, at::ScalarType dtype);

  /// Drops every block nothing else references (held ones stay until their next release).
  void release_free_blocks();
  void set_max_cached_bytes(int64_t max_cached_bytes);
  HostTensorCacheStats stats() const;

  /// The cache the experts use (kDefaultExpertsCacheBytes; set_max_cached_bytes(0) turns it
  /// off).
  static HostTensorCache& experts();

 private:
  void drop_free_blocks_locked();

  mutable std::mutex mutex_;
  std::vector<at::Tensor> blocks_;  // 1-D uint8
  int64_t max_cached_bytes_;
  int64_t min_bytes_;
  HostTensorCacheStats stats_;
};

}  // namespace moescope::runtime
