// Permute: copy token rows into expert-contiguous (padded) order by gathering through
// row_sources, so every output row is written exactly once (padding rows get zeros) and no
// atomics are needed. A pure byte copy: the dtype only fixes the element size.
#include <cstdint>

#include "argument_checks.h"
#include "cuda_checks.cuh"
#include "element_vectors.cuh"
#include "moescope/kernels/launchers.h"

namespace moescope::kernels {
namespace {

/// permuted [row_capacity, row_items] <- tokens [num_tokens, row_items] gathered by
/// row_sources; Item is uint4 (16-byte vectors), uint32_t or uint16_t (single elements).
template <typename Item>
__global__ void permute_rows_kernel(const Item* __restrict__ tokens, long long row_items, int top_k,
                                    const std::int32_t* __restrict__ row_sources,
                                    long long row_capacity, Item* __restrict__ permuted) {
  for (long long row = blockIdx.x; row < row_capacity; row += gridDim.x) {
    const std::int32_t source = row_sources[row];
    Item* out = permuted + row * row_items;
    if (source < 0) {
      const Item zero{};
      for (long long i = threadIdx.x; i < row_items; i += blockDim.x) out[i] = zero;
      continue;
    }
    const Item* in = tokens + static_cast<long long>(source / top_k) * row_items;
    // Four loads in flight per thread before the stores: a row copy is latency-bound otherwise.
    const long long stride = blockDim.x;
    long long i = threadIdx.x;
    for (; i + 3 * stride < row_items; i += 4 * stride) {
      const Item first = in[i], second = in[i + stride], third = in[i + 2 * stride],
                 fourth = in[i + 3 * stride];
      out[i] = first;
      out[i + stride] = second;
      out[i + 2 * stride] = third;
      out[i + 3 * stride] = fourth;
    }
    for (; i < row_items; i += stride) out[i] = in[i];
  }
}

template <typename Item>
void launch_permute_rows(const void* tokens, long long row_items, int top_k,
                         const std::int32_t* row_sources, long long row_capacity, void* permuted,
                         cudaStream_t stream, const char* op) {
  const int threads = detail::threads_for_row(row_items);
  const unsigned int blocks = detail::grid_stride_blocks(row_capacity, 2048 / threads, op);
  permute_rows_kernel<Item>
      <<<blocks, threads, 0, stream>>>(static_cast<const Item*>(tokens), row_items, top_k,
                                       row_sources, row_capacity, static_cast<Item*>(permuted));
  detail::check_launch(op);
}

}  // namespace

void launch_permute_tokens(const void* tokens, DType dtype, std::int64_t num_tokens,
                           std::int64_t hidden, int top_k, const std::int32_t* row_sources,
                           std::int64_t row_capacity, void* permuted, cudaStream_t stream) {
  constexpr const char* kOp = "launch_permute_tokens";
  if (!detail::check_permute_arguments(kOp, tokens, dtype, num_tokens, hidden, top_k, row_sources,
                                       row_capacity, permuted)) {
    return;
  }
  const int element_bytes = static_cast<int>(dtype_size(dtype));
  if (detail::rows_are_vectorizable(hidden, element_bytes, tokens, permuted)) {
    launch_permute_rows<uint4>(tokens, hidden * element_bytes / 16, top_k, row_sources,
                               row_capacity, permuted, stream, kOp);
  } else if (element_bytes == 4) {
    launch_permute_rows<std::uint32_t>(tokens, hidden, top_k, row_sources, row_capacity, permuted,
                                       stream, kOp);
  } else {
    launch_permute_rows<std::uint16_t>(tokens, hidden, top_k, row_sources, row_capacity, permuted,
                                       stream, kOp);
  }
}

void launch_permute_tokens_backward(const void* grad_permuted, DType dtype, std::int64_t num_tokens,
                                    std::int64_t hidden, int top_k,
                                    const std::int32_t* destination_rows, void* grad_tokens,
                                    cudaStream_t stream) {
  // The gradient of a gather is a scatter-add; with destination_rows it becomes a gather-sum
  // per token in fixed j order, which is exactly the unweighted combine.
  launch_unpermute_combine(grad_permuted, dtype, nullptr, destination_rows, num_tokens, hidden,
                           top_k, grad_tokens, stream);
}

}  // namespace moescope::kernels
