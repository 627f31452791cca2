// CPU reference of the grouped GEMM and its weight gradient (plain triple loops, float32
// accumulation).
#include <algorithm>
#include <vector>

#include "argument_checks.h"
#include "element_io.h"
#include "moescope/kernels/cpu_reference.h"

namespace moescope::kernels::reference {

void grouped_gemm(const void* a, const void* b, void* c, DType dtype, int num_groups,
                  const std::int32_t* host_group_offsets, std::int64_t k, std::int64_t n,
                  bool b_is_n_by_k) {
  constexpr const char* kOp = "grouped_gemm";
  detail::require_dtype(kOp, dtype);
  detail::check_group_offsets(kOp, num_groups, host_group_offsets, k, n);
  if (host_group_offsets[num_groups] == 0) return;
  detail::require_pointer(kOp, a, "a");
  detail::require_pointer(kOp, b, "b");
  detail::require_pointer(kOp, c, "c");
  std::vector<float> a_row(k);
  for (int g = 0; g < num_groups; ++g) {
    const std::int64_t b_base = static_cast<std::int64_t>(g) * k * n;
    for (std::int64_t row = host_group_offsets[g]; row < host_group_offsets[g + 1]; ++row) {
      for (std::int64_t i = 0; i < k; ++i) a_row[i] = detail::load_element(a, dtype, row * k + i);
      for (std::int64_t col = 0; col < n; ++col) {
        float sum = 0.0f;
        for (std::int64_t i = 0; i < k; ++i) {
          const std::int64_t b_index = b_is_n_by_k ? b_base + col * k + i : b_base + i * n + col;
          sum += a_row[i] * detail::load_element(b, dtype, b_index);
        }
        detail::store_element(c, dtype, row * n + col, sum);
      }
    }
  }
}

void grouped_gemm_weight_grad(const void* a, const void* grad_c, void* grad_b, DType dtype,
                              int num_groups, const std::int32_t* host_group_offsets,
                              std::int64_t k, std::int64_t n) {
  constexpr const char* kOp = "grouped_gemm_weight_grad";
  detail::require_dtype(kOp, dtype);
  detail::check_group_offsets(kOp, num_groups, host_group_offsets, k, n);
  detail::require_pointer(kOp, grad_b, "grad_b");
  if (host_group_offsets[num_groups] > 0) {
    detail::require_pointer(kOp, a, "a");
    detail::require_pointer(kOp, grad_c, "grad_c");
  }
  std::vector<float> sums(k * n);
  for (int g = 0; g < num_groups; ++g) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    for (std::int64_t row = host_group_offsets[g]; row < host_group_offsets[g + 1]; ++row) {
      for (std::int64_t i = 0; i < k; ++i) {
        const float a_value = detail::load_element(a, dtype, row * k + i);
        for (std::int64_t col = 0; col < n; ++col) {
          sums[i * n + col] += a_value * detail::load_element(grad_c, dtype, row * n + col);
        }
      }
    }
    const std::int64_t base = static_cast<std::int64_t>(g) * k * n;
    for (std::int64_t i = 0; i < k * n; ++i)
      detail::store_element(grad_b, dtype, base + i, sums[i]);
  }
}

}  // namespace moescope::kernels::reference
