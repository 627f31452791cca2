// Every device-to-host read of the MoE runtime goes through this header.
//
// A blocking read (a copy to the host, .item()) makes the host wait until the GPU has finished
// everything queued before it: communication stops overlapping compute, and every such read in a
// layer costs a round trip. The runtime makes them only where it needs the value on the host
// (split sizes of the all-to-all, group sizes of the grouped GEMM, dropped counts, the NaN check),
// and its trace statistics make none (see HostCopyInFlight). The counters make that testable on a
// CPU: a CPU tensor counts like a device tensor, so a count says how often the same code would
// make the host wait for a GPU.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace moescope::runtime {

/// Device-to-host transfers the runtime started in this process (all threads), since it started.
struct HostTransferCounts {
  uint64_t blocking = 0;      // the host waited for the device
  uint64_t non_blocking = 0;  // HostCopyInFlight: the host went on
};
HostTransferCounts host_transfer_counts();

/// Blocking copy of `tensor` (any device) to a contiguous host tensor, converted to `dtype` when
/// given. Waits for the device.
at::Tensor copy_to_host(const at::Tensor& tensor,
                        std::optional<at::ScalarType> dtype = std::nullopt);

/// Blocking copy of `tensor` (any shape, integer dtype, any device) to a flat int64 host vector.
std::vector<int64_t> copy_to_host_int64(const at::Tensor& tensor);

/// The value of a one-element tensor (tensor.item()): blocking.
at::Scalar read_scalar(const at::Tensor& tensor);

/// A non-blocking copy of a device tensor into pinned host memory, followed by an event on the
/// source's current stream: the host goes on, and is_ready() tells (without waiting) when the
/// copy has landed. A CPU source needs no copy: it is ready at once (the same code path runs on
/// CPU-only machines, so its logic is testable there).
class HostCopyInFlight {
 public:
  /// source: any shape and dtype (made contiguous on its device first when it is not). The copy
  /// is queued on the source's current stream, before any later work there.
  /// Throws when the source's current stream is being captured into a CUDA graph (see
  /// capturing_cuda_graph): nothing may allocate pinned memory or record an event there.
  explicit HostCopyInFlight(const at::Tensor& source);
  /// True when `source` is a CUDA tensor whose device's current stream is capturing a CUDA graph
  /// (torch.cuda.graph, at::cuda::CUDAGraph): then no copy may be started. False on CPU and in
  /// builds without CUDA.
  static bool capturing_cuda_graph(const at::Tensor& source);
  HostCopyInFlight(HostCopyInFlight&&) noexcept = default;
  HostCopyInFlight& operator=(HostCopyInFlight&&) noexcept = default;

  /// True once the copy has landed. Polls the event; never waits.
  bool is_ready() const;
  /// Waits for the copy when it has not landed yet (then it counts as a blocking transfer): only
  /// for the end of a recording or the owner's destruction.
  void wait() const;
  /// The host copy: contiguous, same dtype and shape as the source. Valid once is_ready().
  const at::Tensor& host() const { return host_; }

 private:
  at::Tensor host_;
  std::optional<c10::Event> copied_;  // absent for CPU sources
};

}  // namespace moescope::runtime
