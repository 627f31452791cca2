#include "cupti_buffer_pool.h"

#include <algorithm>
#include <cstdlib>

namespace moescope::inject {
namespace {

// CUPTI requires ACTIVITY_RECORD_ALIGNMENT (8); a page keeps buffers off shared cache lines.
constexpr size_t kBufferAlignment = 4096;

size_t round_up(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

CuptiBufferPool::CuptiBufferPool(size_t buffer_bytes, size_t max_total_bytes)
    : buffer_bytes_(round_up(std::max<size_t>(buffer_bytes, 1), kBufferAlignment)),
      max_buffers_(std::max<size_t>(1, max_total_bytes / buffer_bytes_)) {}

CuptiBufferPool::~CuptiBufferPool() {
  // Only idle buffers are freed: a buffer still held by CUPTI may be written to.
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint8_t* buffer : idle_) std::free(buffer);
}

uint8_t* CuptiBufferPool::acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!idle_.empty()) {
    uint8_t* buffer = idle_.back();
    idle_.pop_back();
    return buffer;
  }
  if (all_.size() >= max_buffers_) {
    ++refused_;
    return nullptr;
  }
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, buffer_bytes_));
  if (!buffer) {
    ++refused_;
    return nullptr;
  }
  all_.push_back(buffer);
  return buffer;
}

void CuptiBufferPool::release(uint8_t* buffer) {
  if (!buffer) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (std::find(all_.begin(), all_.end(), buffer) == all_.end()) return;
  if (std::find(idle_.begin(), idle_.end(), buffer) != idle_.end()) return;
  idle_.push_back(buffer);
}

size_t CuptiBufferPool::allocated_buffers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return all_.size();
}

size_t CuptiBufferPool::buffers_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return all_.size() - idle_.size();
}

uint64_t CuptiBufferPool::refused_requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refused_;
}

}  // namespace moescope::inject
