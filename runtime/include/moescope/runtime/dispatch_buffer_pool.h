// DispatchBufferPool: the dispatch/combine row buffers of one MoE layer, allocated once from the
// predicted load and reused every step, so steady-state training makes no device allocation for
// them (and the allocator cannot fragment around buffers whose size changes every step).
//
// Memory layout: one tensor per buffer kind, each [capacity_rows, hidden] of the pool's dtype
// on its device. acquire(kind, rows) hands out the first `rows` rows as a view:
//
//   buffer(kind):  [ rows handed out this step | unused headroom ]
//                   <------------ capacity_rows(kind) ----------->
//
// Capacity comes from reserve_for_predicted_load(max rows any rank is predicted to receive):
// ceil(rows * headroom). A step that needs more grows that buffer to ceil(rows * headroom)
// (counted in stats().growths); capacity never shrinks. Every allocation and release is
// reported to the recorder as a memory event of category MOESCOPE_MEM_DISPATCH_BUFFERS.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>

namespace moescope::runtime {

/// The row buffers of one layer forward (rows = token copies, expert-contiguous).
enum class DispatchBufferKind : int {
  kDispatchSend = 0,     // permuted local rows before the dispatch all-to-all
  kDispatchReceive = 1,  // rows this rank's experts receive
  kCombineSend = 2,      // expert outputs going back
  kCombineReceive = 3,   // expert outputs back at their home rank, before the un-permute
};
inline constexpr int kNumDispatchBufferKinds = 4;
const char* dispatch_buffer_kind_name(DispatchBufferKind kind);

struct DispatchBufferPoolOptions {
  int64_t hidden_size = 0;  // H, the row width
  at::ScalarType dtype = at::kFloat;
  at::Device device = at::kCPU;
  /// Capacity = ceil(predicted rows * headroom); >= 1. Covers the step-to-step noise around the
  /// predicted maximum so that only real load shifts grow a buffer.
  double headroom = 1.25;
};

struct DispatchBufferPoolStats {
  int64_t allocations = 0;          // buffer allocations, first reservations and growths
  int64_t growths = 0;              // allocations because a step exceeded the capacity
  int64_t reuses = 0;               // acquire() calls served from existing capacity
  int64_t acquires = 0;             // all acquire() calls
  int64_t bytes_reserved = 0;       // bytes held now, all buffers
  int64_t peak_bytes_reserved = 0;  // the most bytes ever held at once
  int64_t high_water_rows = 0;      // the most rows one acquire() asked for
};

class DispatchBufferPool {
 public:
  /// Allocates nothing yet. Throws c10::Error naming hidden_size / headroom when out of range.
  explicit DispatchBufferPool(const DispatchBufferPoolOptions& options);
  ~DispatchBufferPool();
  DispatchBufferPool(const DispatchBufferPool&) = delete;
  DispatchBufferPool& operator=(const DispatchBufferPool&) = delete;

  /// Sizes every buffer for ceil(predicted_max_rank_rows * headroom) rows, from e.g. the
  /// largest per-rank sum of predicted tokens per expert from the placement planner
  /// (summarize_gpu_loads(gpu_loads_of_placement(forecast, placement, layer)).max_gpu_load).
  /// A buffer is reallocated only when the forecast has used up half of its headroom
  /// (capacity < predicted_max_rank_rows * (1 + (headroom - 1) / 2)), so forecast noise does not
  /// reallocate in steady state; this is not counted as growth.
  void reserve_for_predicted_load(double predicted_max_rank_rows);

  /// A [rows, hidden] tensor on the memory of buffer `kind` (a plain tensor, not an autograd
  /// view, so an autograd Function may return it). Grows the buffer (one allocation, counted as a
  /// growth) when rows exceed its capacity. The view's contents are whatever the previous step
  /// left there, and the next acquire() of the same kind hands out the same memory: do not
  /// keep the view past the step (e.g. saved for backward). rows >= 0.
  at::Tensor acquire(DispatchBufferKind kind, int64_t rows);

  int64_t capacity_rows(DispatchBufferKind kind) const;
  const DispatchBufferPoolStats& stats() const { return stats_; }
  const DispatchBufferPoolOptions& options() const { return options_; }
  int64_t bytes_per_row() const { return bytes_per_row_; }

 private:
  /// Replaces buffer `kind` with one of `rows` rows, reporting the release and the allocation.
  void reallocate(DispatchBufferKind kind, int64_t rows);
  int64_t rows_with_headroom(double rows) const;

  DispatchBufferPoolOptions options_;
  int64_t bytes_per_row_ = 0;
  std::array<at::Tensor, kNumDispatchBufferKinds> buffers_;  // each [capacity, hidden]
  DispatchBufferPoolStats stats_;
};

}  // namespace moescope::runtime
