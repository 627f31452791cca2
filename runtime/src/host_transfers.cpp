#include "moescope/runtime/host_transfers.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <atomic>

#if defined(MOESCOPE_RUNTIME_CUDA_GRAPH_CHECK)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace moescope::runtime {
namespace {

std::atomic<uint64_t> g_blocking_transfers{0};
std::atomic<uint64_t> g_non_blocking_transfers{0};

void count_blocking_transfer() {
  g_blocking_transfers.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

HostTransferCounts host_transfer_counts() {
  return {g_blocking_transfers.load(std::memory_order_relaxed),
          g_non_blocking_transfers.load(std::memory_order_relaxed)};
}

at::Tensor copy_to_host(const at::Tensor& tensor, std::optional<at::ScalarType> dtype) {
  count_blocking_transfer();
  return tensor.detach().to(at::kCPU, dtype.value_or(tensor.scalar_type())).contiguous();
}

std::vector<int64_t> copy_to_host_int64(const at::Tensor& tensor) {
  const at::Tensor host = copy_to_host(tensor, at::kLong);
  const int64_t* values = host.const_data_ptr<int64_t>();
  return std::vector<int64_t>(values, values + host.numel());
}

at::Scalar read_scalar(const at::Tensor& tensor) {
  count_blocking_transfer();
  return tensor.item();
}

bool HostCopyInFlight::capturing_cuda_graph(const at::Tensor& source) {
#if defined(MOESCOPE_RUNTIME_CUDA_GRAPH_CHECK)
  if (source.defined() && source.is_cuda()) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(
        c10::cuda::getCurrentCUDAStream(source.device().index()).stream(), &status));
    return status != cudaStreamCaptureStatusNone;
  }
#else
  (void)source;
#endif
  return false;
}

HostCopyInFlight::HostCopyInFlight(const at::Tensor& source) {
  // Pinned allocation and an event on a capturing stream would become part of (or invalidate)
  // the program's CUDA graph, and the event could never be queried: callers skip the copy then.
  TORCH_CHECK(!capturing_cuda_graph(source),
              "HostCopyInFlight: the source's stream is being captured into a CUDA graph; no "
              "host copy can be made during capture (check capturing_cuda_graph() first)");
  g_non_blocking_transfers.fetch_add(1, std::memory_order_relaxed);
  const at::Tensor values = source.detach();
  if (values.is_cpu()) {
    // A snapshot, as the device copy is: the source may change in place before the reader runs
    // (the expert bias does, in update_expert_bias).
    host_ = values.clone(at::MemoryFormat::Contiguous);
    return;
  }
  host_ = at::empty(values.sizes(), values.options().device(at::kCPU).pinned_memory(true));
  host_.copy_(values, /*non_blocking=*/true);
  const c10::impl::VirtualGuardImpl device_guard(values.device().type());
  copied_.emplace(values.device().type());
  copied_->record(device_guard.getStream(values.device()));
}

bool HostCopyInFlight::is_ready() const {
  return !copied_.has_value() || copied_->query();
}

void HostCopyInFlight::wait() const {
  if (is_ready()) return;
  count_blocking_transfer();
  copied_->synchronize();
}

}  // namespace moescope::runtime
