// CPU reference of permute (gather into expert-contiguous rows) and its backward.
#include <vector>

#include "argument_checks.h"
#include "element_io.h"
#include "moescope/kernels/cpu_reference.h"

namespace moescope::kernels::reference {

void permute_tokens(const void* tokens, DType dtype, std::int64_t num_tokens, std::int64_t hidden,
                    int top_k, const std::int32_t* row_sources, std::int64_t row_capacity,
                    void* permuted) {
  constexpr const char* kOp = "permute_tokens";
  if (!detail::check_permute_arguments(kOp, tokens, dtype, num_tokens, hidden, top_k, row_sources,
                                       row_capacity, permuted)) {
    return;
  }
  const std::int64_t num_assignments = num_tokens * top_k;
  for (std::int64_t r = 0; r < row_capacity; ++r) {
    const std::int32_t source = row_sources[r];
    if (source >= num_assignments) {
      detail::fail_argument(kOp, "row_sources[" + std::to_string(r) +
                                     "]=" + std::to_string(source) + " >= num_tokens * top_k");
    }
    for (std::int64_t h = 0; h < hidden; ++h) {
      const float value =
          source < 0 ? 0.0f : detail::load_element(tokens, dtype, (source / top_k) * hidden + h);
      detail::store_element(permuted, dtype, r * hidden + h, value);
    }
  }
}

void permute_tokens_backward(const void* grad_permuted, DType dtype, std::int64_t num_tokens,
                             std::int64_t hidden, int top_k, const std::int32_t* destination_rows,
                             void* grad_tokens) {
  // Permute's backward is the unweighted combine: a fixed-order gather-sum per token.
  unpermute_combine(grad_permuted, dtype, nullptr, destination_rows, num_tokens, hidden, top_k,
                    grad_tokens);
}

}  // namespace moescope::kernels::reference
