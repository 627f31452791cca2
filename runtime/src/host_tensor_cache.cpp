#include "moescope/runtime/host_tensor_cache.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace moescope::runtime {
namespace {

bool is_free(const at::Tensor& block) {
  return block.storage().use_count() == 1;  // only the block tensor itself holds it
}

}  // namespace

HostTensorCache::HostTensorCache(int64_t max_cached_bytes, int64_t min_bytes)
    : max_cached_bytes_(max_cached_bytes), min_bytes_(min_bytes) {
  TORCH_CHECK(max_cached_bytes >= 0 && min_bytes >= 1, "HostTensorCache: max_cached_bytes (",
              max_cached_bytes, ") must be >= 0 and min_bytes (", min_bytes, ") >= 1");
}

at::Tensor HostTensorCache::empty(at::IntArrayRef sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t size : sizes) {
    TORCH_CHECK(size >= 0, "HostTensorCache::empty: negative size in ", sizes);
    numel *= size;
  }
  const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(dtype));
  std::lock_guard<std::mutex> lock(mutex_);
  const at::Tensor* block = nullptr;
  if (bytes >= min_bytes_) {
    for (const at::Tensor& candidate : blocks_) {
      if (candidate.numel() >= bytes && is_free(candidate) &&
          (!block || candidate.numel() < block->numel())) {
        block = &candidate;
      }
    }
    if (block) {
      ++stats_.hits;
    } else {
      const int64_t block_bytes = bytes + bytes / 8;
      if (stats_.cached_bytes + block_bytes > max_cached_bytes_) drop_free_blocks_locked();
      if (stats_.cached_bytes + block_bytes <= max_cached_bytes_) {
        // A normal tensor even when the first request comes under InferenceMode: its views
        // serve later training steps, whose autograd must be able to save them.
        c10::InferenceMode not_inference(/*enabled=*/false);
        blocks_.push_back(at::empty({block_bytes}, at::TensorOptions().dtype(at::kByte)));
        stats_.cached_bytes += block_bytes;
        stats_.cached_blocks = static_cast<int64_t>(blocks_.size());
        ++stats_.misses;
        block = &blocks_.back();
      }
    }
  }
  if (!block) {
    ++stats_.uncached;
    return at::empty(sizes, at::TensorOptions().dtype(dtype));
  }
  return block->narrow(0, 0, bytes).view(dtype).view(sizes);
}

void HostTensorCache::drop_free_blocks_locked() {
  std::erase_if(blocks_, [this](const at::Tensor& block) {
    if (!is_free(block)) return false;
    stats_.cached_bytes -= block.numel();
    return true;
  });
  stats_.cached_blocks = static_cast<int64_t>(blocks_.size());
}

void HostTensorCache::release_free_blocks() {
  std::lock_guard<std::mutex> lock(mutex_);
  drop_free_blocks_locked();
}

void HostTensorCache::set_max_cached_bytes(int64_t max_cached_bytes) {
  TORCH_CHECK(max_cached_bytes >= 0, "HostTensorCache: max_cached_bytes (", max_cached_bytes,
              ") must be >= 0");
  std::lock_guard<std::mutex> lock(mutex_);
  max_cached_bytes_ = max_cached_bytes;
  if (stats_.cached_bytes > max_cached_bytes_) drop_free_blocks_locked();
}

HostTensorCacheStats HostTensorCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

HostTensorCache& HostTensorCache::experts() {
  static HostTensorCache* cache =  // leaked: used until exit
      new HostTensorCache(kDefaultExpertsCacheBytes, kExpertsCacheMinBytes);
  return *cache;
}

}  // namespace moescope::runtime
