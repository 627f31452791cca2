#include "moescope/runtime/dispatch_buffer_pool.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "moescope/recorder.h"

namespace moescope::runtime {
namespace {

int32_t recorder_device(const at::Device& device) {
  return device.is_cpu() ? -1 : static_cast<int32_t>(device.index());
}

void report_buffer(const at::Tensor& buffer, int is_free) {
  if (!buffer.defined()) return;
  moescope_memory_event(reinterpret_cast<uint64_t>(buffer.data_ptr()),
                        static_cast<uint64_t>(buffer.nbytes()), recorder_device(buffer.device()),
                        MOESCOPE_MEM_DISPATCH_BUFFERS, is_free);
}

}  // namespace

const char* dispatch_buffer_kind_name(DispatchBufferKind kind) {
  static constexpr const char* kNames[] = {"dispatch_send", "dispatch_receive", "combine_send",
                                           "combine_receive"};
  // One name per value: a value added without its name stops the build.
  static_assert(std::size(kNames) == kNumDispatchBufferKinds);
  const int index = static_cast<int>(kind);
  return index >= 0 && index < kNumDispatchBufferKinds ? kNames[index] : "unknown";
}

DispatchBufferPool::DispatchBufferPool(const DispatchBufferPoolOptions& options)
    : options_(options) {
  TORCH_CHECK(options.hidden_size > 0, "DispatchBufferPool: hidden_size must be > 0, got ",
              options.hidden_size);
  TORCH_CHECK(std::isfinite(options.headroom) && options.headroom >= 1.0,
              "DispatchBufferPool: headroom must be a finite factor >= 1, got ", options.headroom);
  bytes_per_row_ = options.hidden_size * static_cast<int64_t>(c10::elementSize(options.dtype));
}

DispatchBufferPool::~DispatchBufferPool() {
  for (const at::Tensor& buffer : buffers_) report_buffer(buffer, /*is_free=*/1);
}

int64_t DispatchBufferPool::rows_with_headroom(double rows) const {
  return static_cast<int64_t>(std::ceil(rows * options_.headroom));
}

int64_t DispatchBufferPool::capacity_rows(DispatchBufferKind kind) const {
  const at::Tensor& buffer = buffers_.at(static_cast<size_t>(kind));
  return buffer.defined() ? buffer.size(0) : 0;
}

void DispatchBufferPool::reallocate(DispatchBufferKind kind, int64_t rows) {
  at::Tensor& buffer = buffers_.at(static_cast<size_t>(kind));
  if (buffer.defined()) {
    report_buffer(buffer, /*is_free=*/1);
    stats_.bytes_reserved -= buffer.nbytes();
    buffer = at::Tensor();  // release before allocating: the peak is the new size, not both
  }
  buffer = at::empty({rows, options_.hidden_size},
                     at::TensorOptions().dtype(options_.dtype).device(options_.device));
  report_buffer(buffer, /*is_free=*/0);
  ++stats_.allocations;
  stats_.bytes_reserved += buffer.nbytes();
  stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  // Interned per call: ids belong to one recording, and a recorder may restart.
  moescope_counter(moescope_intern("memory.dispatch_buffers"),
                   static_cast<double>(stats_.bytes_reserved));
}

void DispatchBufferPool::reserve_for_predicted_load(double predicted_max_rank_rows) {
  TORCH_CHECK(std::isfinite(predicted_max_rank_rows) && predicted_max_rank_rows >= 0,
              "DispatchBufferPool::reserve_for_predicted_load: predicted_max_rank_rows must be "
              "finite and >= 0, got ",
              predicted_max_rank_rows);
  // Hysteresis: reallocate only once the forecast has eaten half of the headroom, so the
  // forecast's own noise around a stationary load never reallocates in steady state.
  const double trigger_rows = predicted_max_rank_rows * (1.0 + (options_.headroom - 1.0) / 2.0);
  const int64_t rows = std::max<int64_t>(1, rows_with_headroom(predicted_max_rank_rows));
  for (int k = 0; k < kNumDispatchBufferKinds; ++k) {
    const auto kind = static_cast<DispatchBufferKind>(k);
    const int64_t capacity = capacity_rows(kind);
    if (capacity == 0 || static_cast<double>(capacity) < trigger_rows) reallocate(kind, rows);
  }
}

at::Tensor DispatchBufferPool::acquire(DispatchBufferKind kind, int64_t rows) {
  const int index = static_cast<int>(kind);
  TORCH_CHECK(index >= 0 && index < kNumDispatchBufferKinds,
              "DispatchBufferPool::acquire: unknown buffer kind ", index);
  TORCH_CHECK(rows >= 0, "DispatchBufferPool::acquire(", dispatch_buffer_kind_name(kind),
              "): rows must be >= 0, got ", rows);
  ++stats_.acquires;
  stats_.high_water_rows = std::max(stats_.high_water_rows, rows);
  if (rows > capacity_rows(kind)) {
    // A first use without a reservation is an allocation, not a growth.
    if (capacity_rows(kind) > 0) ++stats_.growths;
    reallocate(kind, std::max<int64_t>(rows, rows_with_headroom(static_cast<double>(rows))));
  } else {
    ++stats_.reuses;
  }
  // A plain tensor on the buffer's memory rather than a narrow() view, so that an autograd
  // Function may create it in forward and return it as its output.
  const at::Tensor& buffer = buffers_[static_cast<size_t>(index)];
  if (!buffer.defined()) {
    // No rows before any reservation (a rank whose experts got no token): nothing to hand out
    // from, and nothing worth allocating.
    return at::empty({0, options_.hidden_size},
                     at::TensorOptions().dtype(options_.dtype).device(options_.device));
  }
  at::Tensor rows_tensor = at::empty({0}, buffer.options());
  rows_tensor.set_(buffer.storage(), buffer.storage_offset(), {rows, options_.hidden_size},
                   {options_.hidden_size, 1});
  return rows_tensor;
}

}  // namespace moescope::runtime
