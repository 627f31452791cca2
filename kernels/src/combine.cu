// Unpermute + weighted combine and its backward. Each token sums its k expert rows in j order
// in float32 registers (no atomics), so the result is bitwise reproducible.
#include <cstdint>

#include "argument_checks.h"
#include "cuda_checks.cuh"
#include "element_vectors.cuh"
#include "moescope/kernels/launchers.h"

namespace moescope::kernels {
namespace {

using detail::BFloat16Elements;
using detail::Float32Elements;

/// output [T, H] = sum_j w[t, j] * expert_output[destination_rows[t * k + j]]; rows of
/// row_items Items (RowItem: 16-byte vectors or single elements).
template <typename Item>
__global__ void combine_kernel(const typename Item::Storage* __restrict__ expert_output,
                               const float* __restrict__ topk_weights,
                               const std::int32_t* __restrict__ destination_rows,
                               long long num_tokens, long long row_items, int top_k,
                               typename Item::Storage* __restrict__ output) {
  constexpr int kPer = Item::kPer;
  for (long long token = blockIdx.x; token < num_tokens; token += gridDim.x) {
    const long long first_assignment = token * top_k;
    for (long long v = threadIdx.x; v < row_items; v += blockDim.x) {
      float sums[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) sums[i] = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const std::int32_t row = destination_rows[first_assignment + j];
        if (row < 0) continue;
        const float weight = topk_weights != nullptr ? topk_weights[first_assignment + j] : 1.0f;
        float values[kPer];
        Item::unpack(expert_output[static_cast<long long>(row) * row_items + v], values);
#pragma unroll
        for (int i = 0; i < kPer; ++i) sums[i] += weight * values[i];
      }
      output[token * row_items + v] = Item::pack(sums);
    }
  }
}

/// grad_expert_output [R, H]: row r = w[src] * grad_output[src / k], zeros for padding rows.
template <typename Item>
__global__ void combine_backward_rows_kernel(
    const typename Item::Storage* __restrict__ grad_output, const float* __restrict__ topk_weights,
    const std::int32_t* __restrict__ row_sources, long long row_capacity, long long row_items,
    int top_k, typename Item::Storage* __restrict__ grad_expert_output) {
  constexpr int kPer = Item::kPer;
  for (long long row = blockIdx.x; row < row_capacity; row += gridDim.x) {
    const std::int32_t source = row_sources[row];
    auto* out = grad_expert_output + row * row_items;
    if (source < 0) {
      const typename Item::Storage zero{};
      for (long long v = threadIdx.x; v < row_items; v += blockDim.x) out[v] = zero;
      continue;
    }
    const float weight = topk_weights != nullptr ? topk_weights[source] : 1.0f;
    const auto* in = grad_output + static_cast<long long>(source / top_k) * row_items;
    for (long long v = threadIdx.x; v < row_items; v += blockDim.x) {
      float values[kPer];
      Item::unpack(in[v], values);
#pragma unroll
      for (int i = 0; i < kPer; ++i) values[i] *= weight;
      out[v] = Item::pack(values);
    }
  }
}

/// grad_topk_weights [N]: one warp per assignment, dot(grad_output[t], expert_output[row]);
/// lane-strided partial sums then a fixed xor-shuffle tree (deterministic).
template <typename Item>
__global__ void combine_backward_weights_kernel(
    const typename Item::Storage* __restrict__ grad_output,
    const typename Item::Storage* __restrict__ expert_output,
    const std::int32_t* __restrict__ destination_rows, long long num_assignments,
    long long row_items, int top_k, float* __restrict__ grad_topk_weights) {
  constexpr int kPer = Item::kPer;
  const int lane = threadIdx.x % 32;
  const long long warps_per_grid = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long n = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       n < num_assignments; n += warps_per_grid) {
    const std::int32_t row = destination_rows[n];
    float partial = 0.0f;
    if (row >= 0) {
      const auto* g = grad_output + (n / top_k) * row_items;
      const auto* y = expert_output + static_cast<long long>(row) * row_items;
      for (long long v = lane; v < row_items; v += 32) {
        float g_values[kPer], y_values[kPer];
        Item::unpack(g[v], g_values);
        Item::unpack(y[v], y_values);
#pragma unroll
        for (int i = 0; i < kPer; ++i) partial += g_values[i] * y_values[i];
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    }
    if (lane == 0) grad_topk_weights[n] = partial;
  }
}

/// Launches the per-row kernel `kernel_for(item)` (combine_kernel or
/// combine_backward_rows_kernel, which take the same arguments) for the row item the rows allow:
/// 16-byte vectors where `in` and `out` are aligned for them, else single elements.
template <typename Elements, typename KernelFor>
void launch_row_kernel(KernelFor kernel_for, const void* in, const float* topk_weights,
                       const std::int32_t* row_map, long long rows, long long hidden, int top_k,
                       void* out, cudaStream_t stream, const char* op) {
  detail::launch_by_row_item<Elements>(hidden, in, out, [&](auto item) {
    using Item = decltype(item);
    using Storage = typename Item::Storage;
    const long long row_items = hidden / Item::kPer;
    const int threads = detail::threads_for_row(row_items);
    const unsigned int blocks = detail::grid_stride_blocks(rows, 2048 / threads, op);
    const auto kernel = kernel_for(item);
    kernel<<<blocks, threads, 0, stream>>>(static_cast<const Storage*>(in), topk_weights, row_map,
                                           rows, row_items, top_k, static_cast<Storage*>(out));
  });
  detail::check_launch(op);
}

template <typename Elements>
void launch_combine(const void* expert_output, const float* topk_weights,
                    const std::int32_t* destination_rows, long long num_tokens, long long hidden,
                    int top_k, void* output, cudaStream_t stream, const char* op) {
  launch_row_kernel<Elements>([](auto item) { return combine_kernel<decltype(item)>; },
                              expert_output, topk_weights, destination_rows, num_tokens, hidden,
                              top_k, output, stream, op);
}

template <typename Elements>
void launch_combine_backward(const void* grad_output, const void* expert_output,
                             const float* topk_weights, const std::int32_t* destination_rows,
                             const std::int32_t* row_sources, long long row_capacity,
                             long long num_tokens, long long hidden, int top_k,
                             void* grad_expert_output, float* grad_topk_weights,
                             cudaStream_t stream, const char* op) {
  if (row_capacity > 0) {
    launch_row_kernel<Elements>(
        [](auto item) { return combine_backward_rows_kernel<decltype(item)>; }, grad_output,
        topk_weights, row_sources, row_capacity, hidden, top_k, grad_expert_output, stream, op);
  }
  const long long num_assignments = num_tokens * top_k;
  if (grad_topk_weights != nullptr && num_assignments > 0) {
    constexpr int kThreads = 256;
    const unsigned int blocks =
        detail::grid_stride_blocks((num_assignments + 7) / 8, 2048 / kThreads, op);
    detail::launch_by_row_item<Elements>(hidden, grad_output, expert_output, [&](auto item) {
      using Item = decltype(item);
      using Storage = typename Item::Storage;
      combine_backward_weights_kernel<Item><<<blocks, kThreads, 0, stream>>>(
          static_cast<const Storage*>(grad_output), static_cast<const Storage*>(expert_output),
          destination_rows, num_assignments, hidden / Item::kPer, top_k, grad_topk_weights);
    });
    detail::check_launch(op);
  }
}

}  // namespace

void launch_unpermute_combine(const void* expert_output, DType dtype, const float* topk_weights,
                              const std::int32_t* destination_rows, std::int64_t num_tokens,
                              std::int64_t hidden, int top_k, void* output, cudaStream_t stream) {
  constexpr const char* kOp = "launch_unpermute_combine";
  if (!detail::check_combine_arguments(kOp, expert_output, dtype, destination_rows, num_tokens,
                                       hidden, top_k, output)) {
    return;
  }
  if (dtype == DType::kFloat32) {
    launch_combine<Float32Elements>(expert_output, topk_weights, destination_rows, num_tokens,
                                    hidden, top_k, output, stream, kOp);
  } else {
    launch_combine<BFloat16Elements>(expert_output, topk_weights, destination_rows, num_tokens,
                                     hidden, top_k, output, stream, kOp);
  }
}

void launch_unpermute_combine_backward(const void* grad_output, const void* expert_output,
                                       DType dtype, const float* topk_weights,
                                       const std::int32_t* destination_rows,
                                       const std::int32_t* row_sources, std::int64_t row_capacity,
                                       std::int64_t num_tokens, std::int64_t hidden, int top_k,
                                       void* grad_expert_output, float* grad_topk_weights,
                                       cudaStream_t stream) {
  constexpr const char* kOp = "launch_unpermute_combine_backward";
  detail::require_dtype(kOp, dtype);
  detail::check_token_sizes(kOp, num_tokens, hidden, top_k);
  detail::require_non_negative(kOp, row_capacity, "row_capacity");
  if (row_capacity > 0) {
    detail::require_pointer(kOp, row_sources, "row_sources");
    detail::require_pointer(kOp, grad_expert_output, "grad_expert_output");
  }
  if (num_tokens > 0) detail::require_pointer(kOp, grad_output, "grad_output");
  if (grad_topk_weights != nullptr && num_tokens > 0) {
    detail::require_pointer(kOp, expert_output, "expert_output");
    detail::require_pointer(kOp, destination_rows, "destination_rows");
  }
  if (dtype == DType::kFloat32) {
    launch_combine_backward<Float32Elements>(
        grad_output, expert_output, topk_weights, destination_rows, row_sources, row_capacity,
        num_tokens, hidden, top_k, grad_expert_output, grad_topk_weights, stream, kOp);
  } else {
    launch_combine_backward<BFloat16Elements>(
        grad_output, expert_output, topk_weights, destination_rows, row_sources, row_capacity,
        num_tokens, hidden, top_k, grad_expert_output, grad_topk_weights, stream, kOp);
  }
}

}  // namespace moescope::kernels
