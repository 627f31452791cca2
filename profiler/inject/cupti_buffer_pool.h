// Activity buffers handed to CUPTI, recycled through a bounded pool.
//
// CUPTI asks for an empty buffer whenever it fills one; a completed buffer comes back after
// its records were translated. Buffers are allocated on demand up to `max_total_bytes` and
// then reused, so a long run neither grows without bound nor loses records silently: when the
// cap is reached acquire() refuses, CUPTI drops records and counts them, and the capture
// moves that count into the trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace moescope::inject {

class CuptiBufferPool {
 public:
  // Kineto's sizes: 4 MB buffers (CUPTI recommends 1-10 MB), 128 MB in total.
  static constexpr size_t kDefaultBufferBytes = 4u << 20;
  static constexpr size_t kDefaultMaxTotalBytes = 128u << 20;

  explicit CuptiBufferPool(size_t buffer_bytes = kDefaultBufferBytes,
                           size_t max_total_bytes = kDefaultMaxTotalBytes);
  ~CuptiBufferPool();
  CuptiBufferPool(const CuptiBufferPool&) = delete;
  CuptiBufferPool& operator=(const CuptiBufferPool&) = delete;

  // An 8-byte aligned buffer of buffer_bytes(), or nullptr when every allowed buffer is out.
  uint8_t* acquire();
  // Returns a buffer from acquire() for reuse. Unknown pointers are ignored.
  void release(uint8_t* buffer);

  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t max_buffers() const { return max_buffers_; }
  size_t allocated_buffers() const;  // ever allocated and still owned by the pool
  size_t buffers_in_use() const;     // handed out and not yet released
  uint64_t refused_requests() const;

 private:
  const size_t buffer_bytes_;
  const size_t max_buffers_;
  mutable std::mutex mutex_;
  std::vector<uint8_t*> all_;   // every buffer the pool allocated
  std::vector<uint8_t*> idle_;  // ready for reuse
  uint64_t refused_ = 0;
};

}  // namespace moescope::inject
