// CPU reference of unpermute + weighted combine and its backward.
#include <algorithm>
#include <vector>

#include "argument_checks.h"
#include "element_io.h"
#include "moescope/kernels/cpu_reference.h"

namespace moescope::kernels::reference {

void unpermute_combine(const void* expert_output, DType dtype, const float* topk_weights,
                       const std::int32_t* destination_rows, std::int64_t num_tokens,
                       std::int64_t hidden, int top_k, void* output) {
  constexpr const char* kOp = "unpermute_combine";
  if (!detail::check_combine_arguments(kOp, expert_output, dtype, destination_rows, num_tokens,
                                       hidden, top_k, output)) {
    return;
  }
  std::vector<float> accumulator(hidden);
  for (std::int64_t t = 0; t < num_tokens; ++t) {
    std::fill(accumulator.begin(), accumulator.end(), 0.0f);
    for (int j = 0; j < top_k; ++j) {
      const std::int64_t n = t * top_k + j;
      const std::int32_t row = destination_rows[n];
      if (row < 0) continue;
      detail::require_pointer(kOp, expert_output, "expert_output");
      const float weight = topk_weights != nullptr ? topk_weights[n] : 1.0f;
      for (std::int64_t h = 0; h < hidden; ++h) {
        accumulator[h] += weight * detail::load_element(expert_output, dtype, row * hidden + h);
      }
    }
    for (std::int64_t h = 0; h < hidden; ++h) {
      detail::store_element(output, dtype, t * hidden + h, accumulator[h]);
    }
  }
}

void unpermute_combine_backward(const void* grad_output, const void* expert_output, DType dtype,
                                const float* topk_weights, const std::int32_t* destination_rows,
                                const std::int32_t* row_sources, std::int64_t row_capacity,
                                std::int64_t num_tokens, std::int64_t hidden, int top_k,
                                void* grad_expert_output, float* grad_topk_weights) {
  constexpr const char* kOp = "unpermute_combine_backward";
  detail::require_dtype(kOp, dtype);
  detail::check_token_sizes(kOp, num_tokens, hidden, top_k);
  detail::require_non_negative(kOp, row_capacity, "row_capacity");
  const std::int64_t num_assignments = num_tokens * top_k;
  if (row_capacity > 0) {
    detail::require_pointer(kOp, row_sources, "row_sources");
    detail::require_pointer(kOp, grad_expert_output, "grad_expert_output");
  }
  for (std::int64_t r = 0; r < row_capacity; ++r) {
    const std::int32_t source = row_sources[r];
    if (source >= num_assignments) {
      detail::fail_argument(kOp, "row_sources[" + std::to_string(r) +
                                     "]=" + std::to_string(source) + " >= num_tokens * top_k");
    }
    const float weight =
        source < 0 ? 0.0f : (topk_weights != nullptr ? topk_weights[source] : 1.0f);
    for (std::int64_t h = 0; h < hidden; ++h) {
      const float value = source < 0 ? 0.0f
                                     : weight * detail::load_element(grad_output, dtype,
                                                                     (source / top_k) * hidden + h);
      detail::store_element(grad_expert_output, dtype, r * hidden + h, value);
    }
  }
  if (grad_topk_weights == nullptr) return;
  for (std::int64_t n = 0; n < num_assignments; ++n) {
    const std::int32_t row = destination_rows[n];
    float dot = 0.0f;
    if (row >= 0) {
      const std::int64_t t = n / top_k;
      for (std::int64_t h = 0; h < hidden; ++h) {
        dot += detail::load_element(grad_output, dtype, t * hidden + h) *
               detail::load_element(expert_output, dtype, row * hidden + h);
      }
    }
    grad_topk_weights[n] = dot;
  }
}

}  // namespace moescope::kernels::reference
