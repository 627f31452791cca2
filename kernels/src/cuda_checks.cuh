// Error reporting and launch-size helpers shared by the .cu files (host side).
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace moescope::kernels::detail {

/// Throws std::runtime_error "<op>: <what> failed: <cuda error name> (<message>)".
inline void check_cuda(cudaError_t status, const char* op, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(op) + ": " + what + " failed: " +
                             cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

inline void check_launch(const char* op) {
  check_cuda(cudaGetLastError(), op, "kernel launch");
}

/// Streaming multiprocessors of the current device (cached per device and thread).
inline int multiprocessor_count(const char* op) {
  thread_local int cached_device = -1;
  thread_local int cached_count = 0;
  int device = 0;
  check_cuda(cudaGetDevice(&device), op, "cudaGetDevice");
  if (device != cached_device) {
    check_cuda(cudaDeviceGetAttribute(&cached_count, cudaDevAttrMultiProcessorCount, device), op,
               "cudaDeviceGetAttribute(MultiProcessorCount)");
    cached_device = device;
  }
  return cached_count;
}

/// Blocks for a grid-stride loop over `work_items`: enough to fill the device, never more
/// than the work.
inline unsigned int grid_stride_blocks(long long work_items, int blocks_per_multiprocessor,
                                       const char* op) {
  const long long limit =
      static_cast<long long>(multiprocessor_count(op)) * blocks_per_multiprocessor;
  const long long blocks = work_items < limit ? work_items : limit;
  return static_cast<unsigned int>(blocks > 0 ? blocks : 1);
}

}  // namespace moescope::kernels::detail
