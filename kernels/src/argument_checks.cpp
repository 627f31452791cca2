#include "argument_checks.h"

namespace moescope::kernels::detail {

void check_router_config(const char* op, const RouterConfig& config) {
  if (const std::string error = router_config_error(config); !error.empty()) {
    fail_argument(op, error);
  }
}

void check_router_arguments(const char* op, const RouterConfig& config, std::int64_t num_tokens,
                            std::initializer_list<RequiredPointer> required) {
  check_router_config(op, config);
  require_non_negative(op, num_tokens, "num_tokens");
  if (num_tokens == 0) return;
  for (const RequiredPointer& argument : required)
    require_pointer(op, argument.pointer, argument.name);
}

void check_routing_map_sizes(const char* op, std::int64_t num_assignments, int num_experts,
                             int row_alignment, std::int64_t row_capacity) {
  require_non_negative(op, num_assignments, "num_assignments");
  if (num_experts < 1) {
    fail_argument(op, "num_experts must be >= 1, got " + std::to_string(num_experts));
  }
  if (row_alignment < 1) {
    fail_argument(op, "row_alignment must be >= 1, got " + std::to_string(row_alignment));
  }
  const std::int64_t needed = permuted_row_capacity(num_assignments, num_experts, row_alignment);
  if (row_capacity < needed) {
    fail_argument(op, "row_capacity must be >= permuted_row_capacity()=" + std::to_string(needed) +
                          ", got " + std::to_string(row_capacity));
  }
  if (needed > INT32_MAX) {
    fail_argument(
        op, "num_assignments too large for int32 row indices: " + std::to_string(num_assignments));
  }
}

void check_token_sizes(const char* op, std::int64_t num_tokens, std::int64_t hidden, int top_k) {
  require_non_negative(op, num_tokens, "num_tokens");
  if (hidden < 1) fail_argument(op, "hidden must be >= 1, got " + std::to_string(hidden));
  if (top_k < 1) fail_argument(op, "top_k must be >= 1, got " + std::to_string(top_k));
  if (num_tokens * top_k > INT32_MAX) {
    fail_argument(op, "num_tokens * top_k exceeds int32 assignment indices");
  }
}

void check_group_offsets(const char* op, int num_groups, const std::int32_t* host_group_offsets,
                         std::int64_t k, std::int64_t n) {
  if (num_groups < 1)
    fail_argument(op, "num_groups must be >= 1, got " + std::to_string(num_groups));
  if (k < 1 || n < 1) {
    fail_argument(op,
                  "k and n must be >= 1, got k=" + std::to_string(k) + " n=" + std::to_string(n));
  }
  require_pointer(op, host_group_offsets, "host_group_offsets");
  if (host_group_offsets[0] != 0) {
    fail_argument(op,
                  "host_group_offsets[0] must be 0, got " + std::to_string(host_group_offsets[0]));
  }
  for (int g = 0; g < num_groups; ++g) {
    if (host_group_offsets[g + 1] < host_group_offsets[g]) {
      fail_argument(op, "host_group_offsets must be non-decreasing; offsets[" +
                            std::to_string(g + 1) +
                            "]=" + std::to_string(host_group_offsets[g + 1]) + " < offsets[" +
                            std::to_string(g) + "]=" + std::to_string(host_group_offsets[g]));
    }
  }
}

bool check_permute_arguments(const char* op, const void* tokens, DType dtype,
                             std::int64_t num_tokens, std::int64_t hidden, int top_k,
                             const std::int32_t* row_sources, std::int64_t row_capacity,
                             const void* permuted) {
  require_dtype(op, dtype);
  check_token_sizes(op, num_tokens, hidden, top_k);
  require_non_negative(op, row_capacity, "row_capacity");
  if (row_capacity == 0) return false;
  require_pointer(op, row_sources, "row_sources");
  require_pointer(op, permuted, "permuted");
  if (num_tokens > 0) require_pointer(op, tokens, "tokens");
  return true;
}

bool check_combine_arguments(const char* op, const void* expert_output, DType dtype,
                             const std::int32_t* destination_rows, std::int64_t num_tokens,
                             std::int64_t hidden, int top_k, const void* output) {
  require_dtype(op, dtype);
  check_token_sizes(op, num_tokens, hidden, top_k);
  if (num_tokens == 0) return false;
  require_pointer(op, destination_rows, "destination_rows");
  require_pointer(op, output, "output");
  require_pointer(op, expert_output, "expert_output");
  return true;
}

}  // namespace moescope::kernels::detail
