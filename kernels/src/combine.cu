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

/// output [T, H] = sum_j w[t, j] * expert_output[destination_rows[t * k + j]], 16-byte vectors.
template <typename Elements>
__global__ void combine_vectorized_kernel(const uint4* __restrict__ expert_output,
                                          const float* __restrict__ topk_weights,
                                          const std::int32_t* __restrict__ destination_rows,
                                          long long num_tokens, long long row_vectors, int top_k,
                                          uint4* __restrict__ output) {
  constexpr int kPer = Elements::kPerVector;
  for (long long token = blockIdx.x; token < num_tokens; token += gridDim.x) {
    const long long first_assignment = token * top_k;
    for (long long v = threadIdx.x; v < row_vectors; v += blockDim.x) {
      float sums[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) sums[i] = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const std::int32_t row = destination_rows[first_assignment + j];
        if (row < 0) continue;
        const float weight = topk_weights != nullptr ? topk_weights[first_assignment + j] : 1.0f;
        float values[kPer];
        Elements::unpack(expert_output[static_cast<long long>(row) * row_vectors + v], values);
#pragma unroll
        for (int i = 0; i < kPer; ++i) sums[i] += weight * values[i];
      }
      output[token * row_vectors + v] = Elements::pack(sums);
    }
  }
}

/// Same as combine_vectorized_kernel, one element at a time (unaligned rows).
template <typename Elements>
__global__ void combine_elementwise_kernel(
    const typename Elements::Storage* __restrict__ expert_output,
    const float* __restrict__ topk_weights, const std::int32_t* __restrict__ destination_rows,
    long long num_tokens, long long hidden, int top_k,
    typename Elements::Storage* __restrict__ output) {
  for (long long token = blockIdx.x; token < num_tokens; token += gridDim.x) {
    const long long first_assignment = token * top_k;
    for (long long h = threadIdx.x; h < hidden; h += blockDim.x) {
      float sum = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        const std::int32_t row = destination_rows[first_assignment + j];
        if (row < 0) continue;
        const float weight = topk_weights != nullptr ? topk_weights[first_assignment + j] : 1.0f;
        sum += weight * Elements::to_float(expert_output[static_cast<long long>(row) * hidden + h]);
      }
      output[token * hidden + h] = Elements::from_float(sum);
    }
  }
}

/// grad_expert_output [R, H]: row r = w[src] * grad_output[src / k], zeros for padding rows.
template <typename Elements>
__global__ void combine_backward_rows_kernel(
    const typename Elements::Storage* __restrict__ grad_output,
    const float* __restrict__ topk_weights, const std::int32_t* __restrict__ row_sources,
    long long row_capacity, long long hidden, int top_k,
    typename Elements::Storage* __restrict__ grad_expert_output) {
  for (long long row = blockIdx.x; row < row_capacity; row += gridDim.x) {
    const std::int32_t source = row_sources[row];
    auto* out = grad_expert_output + row * hidden;
    if (source < 0) {
      for (long long h = threadIdx.x; h < hidden; h += blockDim.x)
        out[h] = Elements::from_float(0.0f);
      continue;
    }
    const float weight = topk_weights != nullptr ? topk_weights[source] : 1.0f;
    const auto* in = grad_output + static_cast<long long>(source / top_k) * hidden;
    for (long long h = threadIdx.x; h < hidden; h += blockDim.x) {
      out[h] = Elements::from_float(weight * Elements::to_float(in[h]));
    }
  }
}

template <typename Elements>
__global__ void combine_backward_rows_vectorized_kernel(
    const uint4* __restrict__ grad_output, const float* __restrict__ topk_weights,
    const std::int32_t* __restrict__ row_sources, long long row_capacity, long long row_vectors,
    int top_k, uint4* __restrict__ grad_expert_output) {
  constexpr int kPer = Elements::kPerVector;
  for (long long row = blockIdx.x; row < row_capacity; row += gridDim.x) {
    const std::int32_t source = row_sources[row];
    uint4* out = grad_expert_output + row * row_vectors;
    if (source < 0) {
      for (long long v = threadIdx.x; v < row_vectors; v += blockDim.x)
        out[v] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const float weight = topk_weights != nullptr ? topk_weights[source] : 1.0f;
    const uint4* in = grad_output + static_cast<long long>(source / top_k) * row_vectors;
    for (long long v = threadIdx.x; v < row_vectors; v += blockDim.x) {
      float values[kPer];
      Elements::unpack(in[v], values);
#pragma unroll
      for (int i = 0; i < kPer; ++i) values[i] *= weight;
      out[v] = Elements::pack(values);
    }
  }
}

/// grad_topk_weights [N]: one warp per assignment, dot(grad_output[t], expert_output[row]);
/// lane-strided partial sums then a fixed xor-shuffle tree (deterministic). kVectorized reads
/// 16-byte vectors (rows must be vectorizable), else single elements.
template <typename Elements, bool kVectorized>
__global__ void combine_backward_weights_kernel(
    const typename Elements::Storage* __restrict__ grad_output,
    const typename Elements::Storage* __restrict__ expert_output,
    const std::int32_t* __restrict__ destination_rows, long long num_assignments, long long hidden,
    int top_k, float* __restrict__ grad_topk_weights) {
  constexpr int kPer = Elements::kPerVector;
  const int lane = threadIdx.x % 32;
  const long long warps_per_grid = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long n = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       n < num_assignments; n += warps_per_grid) {
    const std::int32_t row = destination_rows[n];
    float partial = 0.0f;
    if (row >= 0) {
      const auto* g = grad_output + (n / top_k) * hidden;
      const auto* y = expert_output + static_cast<long long>(row) * hidden;
      if constexpr (kVectorized) {
        const auto* g_vectors = reinterpret_cast<const uint4*>(g);
        const auto* y_vectors = reinterpret_cast<const uint4*>(y);
        for (long long v = lane; v < hidden / kPer; v += 32) {
          float g_values[kPer], y_values[kPer];
          Elements::unpack(g_vectors[v], g_values);
          Elements::unpack(y_vectors[v], y_values);
#pragma unroll
          for (int i = 0; i < kPer; ++i) partial += g_values[i] * y_values[i];
        }
      } else {
        for (long long h = lane; h < hidden; h += 32) {
          partial += Elements::to_float(g[h]) * Elements::to_float(y[h]);
        }
      }
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      partial += __shfl_xor_sync(0xffffffffu, partial, offset);
    }
    if (lane == 0) grad_topk_weights[n] = partial;
  }
}

template <typename Elements>
void launch_combine(const void* expert_output, const float* topk_weights,
                    const std::int32_t* destination_rows, long long num_tokens, long long hidden,
                    int top_k, void* output, cudaStream_t stream, const char* op) {
  using Storage = typename Elements::Storage;
  const int element_bytes = sizeof(Storage);
  if (detail::rows_are_vectorizable(hidden, element_bytes, expert_output, output)) {
    const long long row_vectors = hidden / Elements::kPerVector;
    const int threads = detail::threads_for_row(row_vectors);
    const unsigned int blocks = detail::grid_stride_blocks(num_tokens, 2048 / threads, op);
    combine_vectorized_kernel<Elements><<<blocks, threads, 0, stream>>>(
        static_cast<const uint4*>(expert_output), topk_weights, destination_rows, num_tokens,
        row_vectors, top_k, static_cast<uint4*>(output));
  } else {
    const int threads = detail::threads_for_row(hidden);
    const unsigned int blocks = detail::grid_stride_blocks(num_tokens, 2048 / threads, op);
    combine_elementwise_kernel<Elements><<<blocks, threads, 0, stream>>>(
        static_cast<const Storage*>(expert_output), topk_weights, destination_rows, num_tokens,
        hidden, top_k, static_cast<Storage*>(output));
  }
  detail::check_launch(op);
}

template <typename Elements>
void launch_combine_backward(const void* grad_output, const void* expert_output,
                             const float* topk_weights, const std::int32_t* destination_rows,
                             const std::int32_t* row_sources, long long row_capacity,
                             long long num_tokens, long long hidden, int top_k,
                             void* grad_expert_output, float* grad_topk_weights,
                             cudaStream_t stream, const char* op) {
  using Storage = typename Elements::Storage;
  if (row_capacity > 0) {
    if (detail::rows_are_vectorizable(hidden, sizeof(Storage), grad_output, grad_expert_output)) {
      const long long row_vectors = hidden / Elements::kPerVector;
      const int threads = detail::threads_for_row(row_vectors);
      const unsigned int blocks = detail::grid_stride_blocks(row_capacity, 2048 / threads, op);
      combine_backward_rows_vectorized_kernel<Elements><<<blocks, threads, 0, stream>>>(
          static_cast<const uint4*>(grad_output), topk_weights, row_sources, row_capacity,
          row_vectors, top_k, static_cast<uint4*>(grad_expert_output));
    } else {
      const int threads = detail::threads_for_row(hidden);
      const unsigned int blocks = detail::grid_stride_blocks(row_capacity, 2048 / threads, op);
      combine_backward_rows_kernel<Elements><<<blocks, threads, 0, stream>>>(
          static_cast<const Storage*>(grad_output), topk_weights, row_sources, row_capacity, hidden,
          top_k, static_cast<Storage*>(grad_expert_output));
    }
    detail::check_launch(op);
  }
  const long long num_assignments = num_tokens * top_k;
  if (grad_topk_weights != nullptr && num_assignments > 0) {
    constexpr int kThreads = 256;
    const unsigned int blocks =
        detail::grid_stride_blocks((num_assignments + 7) / 8, 2048 / kThreads, op);
    const auto* g = static_cast<const Storage*>(grad_output);
    const auto* y = static_cast<const Storage*>(expert_output);
    if (detail::rows_are_vectorizable(hidden, sizeof(Storage), grad_output, expert_output)) {
      combine_backward_weights_kernel<Elements, true><<<blocks, kThreads, 0, stream>>>(
          g, y, destination_rows, num_assignments, hidden, top_k, grad_topk_weights);
    } else {
      combine_backward_weights_kernel<Elements, false><<<blocks, kThreads, 0, stream>>>(
          g, y, destination_rows, num_assignments, hidden, top_k, grad_topk_weights);
    }
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
