// Fused router: one warp per token. The token's scores live in shared memory; top-k is k
// rounds of a warp-wide argmax (higher score first, ties to the lower expert id, NaN marks an
// expert already taken), so the result matches router_cpu.cpp's order exactly.
//
// Shared memory, per warp (E experts, G groups):
//   [ scores: E floats | selection: E floats | group_scores: G floats | group_kept: G ints |
//     chosen: kMaxTopK ints ]
// then one block-wide histogram of E ints for selections_per_expert.
#include <cmath>
#include <cstdint>

#include "argument_checks.h"
#include "cuda_checks.cuh"
#include "moescope/kernels/launchers.h"

namespace moescope::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxTopK = 64;
constexpr unsigned int kFullMask = 0xffffffffu;

__device__ __forceinline__ bool is_better(float value, int index, float best_value,
                                          int best_index) {
  return value > best_value || (value == best_value && index < best_index);
}

/// Warp-wide argmax over values[begin, end) (lane-strided); every lane gets the winner.
__device__ int warp_argmax(const float* values, int begin, int end, int lane) {
  float best_value = -INFINITY;
  int best_index = 0x7fffffff;
  for (int i = begin + lane; i < end; i += 32) {
    if (is_better(values[i], i, best_value, best_index)) {
      best_value = values[i];
      best_index = i;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(kFullMask, best_value, offset);
    const int other_index = __shfl_xor_sync(kFullMask, best_index, offset);
    if (is_better(other_value, other_index, best_value, best_index)) {
      best_value = other_value;
      best_index = other_index;
    }
  }
  return best_index;
}

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

/// Thread-local top-1 and top-2 (same order as warp_argmax) of values[begin, end).
__device__ float top2_sum(const float* values, int begin, int end) {
  float first = -INFINITY, second = -INFINITY;
  int first_index = 0x7fffffff, second_index = 0x7fffffff;
  for (int i = begin; i < end; ++i) {
    if (is_better(values[i], i, first, first_index)) {
      second = first;
      second_index = first_index;
      first = values[i];
      first_index = i;
    } else if (is_better(values[i], i, second, second_index)) {
      second = values[i];
      second_index = i;
    }
  }
  return end - begin > 1 ? first + second : first;
}

std::size_t router_warp_floats(const RouterConfig& config) {
  return 2 * static_cast<std::size_t>(config.num_experts) + 2 * config.num_groups + kMaxTopK;
}

std::size_t router_forward_shared_bytes(const RouterConfig& config) {
  return (kWarpsPerBlock * router_warp_floats(config) + config.num_experts) * sizeof(float);
}

__global__ void router_forward_kernel(const float* __restrict__ logits,
                                      const float* __restrict__ expert_bias, long long num_tokens,
                                      RouterConfig config, float* __restrict__ scores_out,
                                      std::int32_t* __restrict__ topk_ids,
                                      float* __restrict__ topk_weights,
                                      std::int32_t* __restrict__ selections_per_expert) {
  extern __shared__ float shared[];
  const int num_experts = config.num_experts;
  const int num_groups = config.num_groups;
  const int top_k = config.top_k;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::size_t warp_floats =
      2 * static_cast<std::size_t>(num_experts) + 2 * num_groups + kMaxTopK;
  float* scores = shared + warp * warp_floats;
  float* selection = scores + num_experts;
  float* group_scores = selection + num_experts;
  int* group_kept = reinterpret_cast<int*>(group_scores + num_groups);
  int* chosen = group_kept + num_groups;
  int* block_counts = reinterpret_cast<int*>(shared + kWarpsPerBlock * warp_floats);

  if (selections_per_expert != nullptr) {
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) block_counts[e] = 0;
  }
  __syncthreads();

  const long long warps_in_grid = static_cast<long long>(gridDim.x) * kWarpsPerBlock;
  for (long long token = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + warp;
       token < num_tokens; token += warps_in_grid) {
    const float* row = logits + token * num_experts;
    float* scores_row = scores_out + token * num_experts;
    if (config.score_function == ScoreFunction::kSoftmax) {
      float local_max = -INFINITY;
      for (int e = lane; e < num_experts; e += 32) local_max = fmaxf(local_max, row[e]);
      const float max_logit = warp_max(local_max);
      float local_sum = 0.0f;
      for (int e = lane; e < num_experts; e += 32) {
        const float exponential = expf(row[e] - max_logit);
        scores[e] = exponential;
        local_sum += exponential;
      }
      const float sum = warp_sum(local_sum);
      for (int e = lane; e < num_experts; e += 32) scores[e] = scores[e] / sum;
    } else {
      for (int e = lane; e < num_experts; e += 32) scores[e] = 1.0f / (1.0f + expf(-row[e]));
    }
    for (int e = lane; e < num_experts; e += 32) {
      scores_row[e] = scores[e];
      // NaN ranks lowest (as in router_cpu.cpp): NaN is reserved for "already taken".
      const float value = scores[e] + (expert_bias != nullptr ? expert_bias[e] : 0.0f);
      selection[e] = isnan(value) ? -INFINITY : value;
    }
    __syncwarp();

    if (num_groups > 1) {
      const int experts_per_group = num_experts / num_groups;
      for (int g = lane; g < num_groups; g += 32) {
        group_scores[g] = top2_sum(selection, g * experts_per_group, (g + 1) * experts_per_group);
        group_kept[g] = 0;
      }
      __syncwarp();
      for (int round = 0; round < config.group_top_k; ++round) {
        const int g = warp_argmax(group_scores, 0, num_groups, lane);
        __syncwarp();
        if (lane == 0) {
          group_kept[g] = 1;
          group_scores[g] = NAN;
        }
        __syncwarp();
      }
      for (int e = lane; e < num_experts; e += 32) {
        if (!group_kept[e / experts_per_group]) selection[e] = -INFINITY;
      }
      __syncwarp();
    }

    float selected_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int expert = warp_argmax(selection, 0, num_experts, lane);
      __syncwarp();
      if (lane == 0) {
        selection[expert] = NAN;
        chosen[j] = expert;
      }
      __syncwarp();
      selected_sum += scores[expert];
    }
    const float denominator = config.normalize_top_k ? selected_sum + kNormalizeEpsilon : 1.0f;
    for (int j = lane; j < top_k; j += 32) {
      const int expert = chosen[j];
      topk_ids[token * top_k + j] = expert;
      topk_weights[token * top_k + j] = scores[expert] / denominator * config.scaling_factor;
      if (selections_per_expert != nullptr) atomicAdd(&block_counts[expert], 1);
    }
    __syncwarp();
  }

  if (selections_per_expert != nullptr) {
    __syncthreads();
    // Integer atomics: the totals do not depend on the order.
    for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
      if (block_counts[e] != 0) atomicAdd(&selections_per_expert[e], block_counts[e]);
    }
  }
}

__global__ void router_backward_kernel(const float* __restrict__ scores,
                                       const std::int32_t* __restrict__ topk_ids,
                                       const float* __restrict__ grad_topk_weights,
                                       const float* __restrict__ grad_scores, long long num_tokens,
                                       RouterConfig config, float* __restrict__ grad_logits) {
  extern __shared__ float shared[];
  const int num_experts = config.num_experts;
  const int top_k = config.top_k;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  float* grad_score = shared + warp * num_experts;
  const long long warps_in_grid = static_cast<long long>(gridDim.x) * kWarpsPerBlock;
  for (long long token = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + warp;
       token < num_tokens; token += warps_in_grid) {
    const float* p = scores + token * num_experts;
    const std::int32_t* ids = topk_ids + token * top_k;
    const float* grad_weights = grad_topk_weights + token * top_k;
    for (int e = lane; e < num_experts; e += 32) {
      grad_score[e] = grad_scores != nullptr ? grad_scores[token * num_experts + e] : 0.0f;
    }
    __syncwarp();
    // Same j order as the CPU reference: w_j = s * p_j / D, D = sum_l p_l + eps.
    float selected_sum = 0.0f;
    float weighted_grad = 0.0f;
    if (config.normalize_top_k) {
      for (int j = 0; j < top_k; ++j) {
        const int expert = ids[j];
        const float p_j = (expert >= 0 && expert < num_experts) ? p[expert] : 0.0f;
        selected_sum += p_j;
        weighted_grad += grad_weights[j] * p_j;
      }
    }
    const float denominator = selected_sum + kNormalizeEpsilon;
    for (int j = lane; j < top_k; j += 32) {
      const int expert = ids[j];
      if (expert < 0 || expert >= num_experts) continue;
      grad_score[expert] += config.normalize_top_k
                                ? config.scaling_factor / denominator *
                                      (grad_weights[j] - weighted_grad / denominator)
                                : config.scaling_factor * grad_weights[j];
    }
    __syncwarp();
    float* grad_row = grad_logits + token * num_experts;
    if (config.score_function == ScoreFunction::kSigmoid) {
      for (int e = lane; e < num_experts; e += 32) {
        grad_row[e] = grad_score[e] * p[e] * (1.0f - p[e]);
      }
    } else {
      float local_dot = 0.0f;
      for (int e = lane; e < num_experts; e += 32) local_dot += grad_score[e] * p[e];
      const float dot = warp_sum(local_dot);
      for (int e = lane; e < num_experts; e += 32) grad_row[e] = p[e] * (grad_score[e] - dot);
    }
    __syncwarp();
  }
}

void require_supported_router(const char* op, const RouterConfig& config) {
  detail::check_router_config(op, config);
  if (!supports_router(config)) {
    detail::fail_argument(op,
                          "config outside the CUDA router's limits (num_experts <= 1024, "
                          "top_k <= 64): check supports_router() first");
  }
}

void set_shared_bytes(const void* kernel, std::size_t bytes, const char* op) {
  if (bytes > 48 * 1024) {
    detail::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)),
                       op, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
}

}  // namespace

void launch_router_forward(const float* logits, const float* expert_bias, std::int64_t num_tokens,
                           const RouterConfig& config, float* scores, std::int32_t* topk_ids,
                           float* topk_weights, std::int32_t* selections_per_expert,
                           cudaStream_t stream) {
  constexpr const char* kOp = "launch_router_forward";
  require_supported_router(kOp, config);
  detail::require_non_negative(kOp, num_tokens, "num_tokens");
  if (selections_per_expert != nullptr) {
    detail::check_cuda(cudaMemsetAsync(selections_per_expert, 0,
                                       sizeof(std::int32_t) * config.num_experts, stream),
                       kOp, "cudaMemsetAsync(selections_per_expert)");
  }
  if (num_tokens == 0) return;
  detail::require_pointer(kOp, logits, "logits");
  detail::require_pointer(kOp, scores, "scores");
  detail::require_pointer(kOp, topk_ids, "topk_ids");
  detail::require_pointer(kOp, topk_weights, "topk_weights");
  const std::size_t shared_bytes = router_forward_shared_bytes(config);
  set_shared_bytes(reinterpret_cast<const void*>(&router_forward_kernel), shared_bytes, kOp);
  const unsigned int blocks =
      detail::grid_stride_blocks((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock, 8, kOp);
  router_forward_kernel<<<blocks, kWarpsPerBlock * 32, shared_bytes, stream>>>(
      logits, expert_bias, num_tokens, config, scores, topk_ids, topk_weights,
      selections_per_expert);
  detail::check_launch(kOp);
}

void launch_router_backward(const float* scores, const std::int32_t* topk_ids,
                            const float* grad_topk_weights, const float* grad_scores,
                            std::int64_t num_tokens, const RouterConfig& config, float* grad_logits,
                            cudaStream_t stream) {
  constexpr const char* kOp = "launch_router_backward";
  require_supported_router(kOp, config);
  detail::require_non_negative(kOp, num_tokens, "num_tokens");
  if (num_tokens == 0) return;
  detail::require_pointer(kOp, scores, "scores");
  detail::require_pointer(kOp, topk_ids, "topk_ids");
  detail::require_pointer(kOp, grad_topk_weights, "grad_topk_weights");
  detail::require_pointer(kOp, grad_logits, "grad_logits");
  const std::size_t shared_bytes = kWarpsPerBlock * config.num_experts * sizeof(float);
  const unsigned int blocks =
      detail::grid_stride_blocks((num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock, 8, kOp);
  router_backward_kernel<<<blocks, kWarpsPerBlock * 32, shared_bytes, stream>>>(
      scores, topk_ids, grad_topk_weights, grad_scores, num_tokens, config, grad_logits);
  detail::check_launch(kOp);
}

}  // namespace moescope::kernels
