// Capability queries: which sizes/dtypes/alignments the CUDA kernels handle, so the runtime can
// pick the ATen/CPU path instead of failing. Pure host code, built with or without CUDA.
#include <cstdint>

#include "moescope/kernels/launchers.h"
#include "routing_map_chunks.h"

namespace moescope::kernels {
namespace {

bool is_aligned_16(const void* pointer) {
  return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0;
}

bool is_known_dtype(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16;
}

}  // namespace

bool cuda_kernels_built() {
#if defined(MOESCOPE_KERNELS_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

bool supports_router(const RouterConfig& config) {
  return config.num_experts <= 1024 && config.top_k <= 64 && router_config_error(config).empty();
}

bool supports_routing_map(std::int64_t num_assignments, int num_experts, int row_alignment) {
  if (num_assignments < 0 || num_experts < 1 || num_experts > 1024) return false;
  if (row_alignment < 1 || row_alignment > 1024) return false;
  return permuted_row_capacity(num_assignments, num_experts, row_alignment) < INT32_MAX;
}

bool supports_permute(DType dtype, std::int64_t hidden, const void* input, const void* output) {
  (void)input;
  (void)output;  // unaligned buffers take the element-wise path
  return is_known_dtype(dtype) && hidden >= 1;
}

bool supports_unpermute_combine(DType dtype, std::int64_t hidden, const void* input,
                                const void* output) {
  return supports_permute(dtype, hidden, input, output);
}

bool supports_grouped_gemm(DType dtype, std::int64_t k, std::int64_t n, const void* a,
                           const void* b, const void* c) {
  if (!is_known_dtype(dtype) || k < 1 || n < 1) return false;
  const std::int64_t elements_per_16_bytes = 16 / static_cast<std::int64_t>(dtype_size(dtype));
  if (k % elements_per_16_bytes != 0 || n % elements_per_16_bytes != 0) return false;
  return is_aligned_16(a) && is_aligned_16(b) && is_aligned_16(c);
}

std::size_t grouped_gemm_workspace_bytes(int num_groups) {
  return num_groups <= 0 ? 0 : 3 * static_cast<std::size_t>(num_groups) * sizeof(void*);
}

std::size_t routing_map_workspace_bytes(std::int64_t num_assignments, int num_experts) {
  const std::int64_t kAssignmentsPerChunk = detail::kRoutingMapAssignmentsPerChunk;
  const std::int64_t chunks = (num_assignments + kAssignmentsPerChunk - 1) / kAssignmentsPerChunk;
  return static_cast<std::size_t>(chunks > 0 ? chunks : 1) * static_cast<std::size_t>(num_experts) *
         sizeof(std::int32_t);
}

}  // namespace moescope::kernels
