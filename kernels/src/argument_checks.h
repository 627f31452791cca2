// Host-side argument validation shared by the CUDA launchers and the CPU references, so both
// reject the same inputs with the same message: "<op>: <argument> <what is wrong>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "moescope/kernels/types.h"

namespace moescope::kernels::detail {

[[noreturn]] inline void fail_argument(const char* op, const std::string& message) {
  throw std::invalid_argument(std::string(op) + ": " + message);
}

inline void require_pointer(const char* op, const void* pointer, const char* name) {
  if (pointer == nullptr) fail_argument(op, std::string(name) + " must not be null");
}

inline void require_non_negative(const char* op, std::int64_t value, const char* name) {
  if (value < 0)
    fail_argument(op, std::string(name) + " must be >= 0, got " + std::to_string(value));
}

inline void require_dtype(const char* op, DType dtype) {
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    fail_argument(
        op, "dtype must be float32 or bfloat16, got " + std::to_string(static_cast<int>(dtype)));
  }
}

/// Checks a RouterConfig for consistency (not for CUDA size limits: see supports_router).
void check_router_config(const char* op, const RouterConfig& config);

/// An argument that must not be null (when there is work): the pointer and its name.
struct RequiredPointer {
  const void* pointer;
  const char* name;
};

/// The checks the CPU router's entry points start with: `config` consistent, num_tokens >= 0
/// and, when there is a token, every pointer of `required` set.
void check_router_arguments(const char* op, const RouterConfig& config, std::int64_t num_tokens,
                            std::initializer_list<RequiredPointer> required);

/// Checks num_experts, row_alignment and row_capacity of a routing map.
void check_routing_map_sizes(const char* op, std::int64_t num_assignments, int num_experts,
                             int row_alignment, std::int64_t row_capacity);

/// Checks num_tokens, hidden, top_k of permute/combine ops.
void check_token_sizes(const char* op, std::int64_t num_tokens, std::int64_t hidden, int top_k);

/// The checks permute_tokens and launch_permute_tokens share: tokens [T, H], row_sources [R],
/// permuted [R, H]. Returns false when there is no row to write (R == 0).
bool check_permute_arguments(const char* op, const void* tokens, DType dtype,
                             std::int64_t num_tokens, std::int64_t hidden, int top_k,
                             const std::int32_t* row_sources, std::int64_t row_capacity,
                             const void* permuted);

/// The checks unpermute_combine and launch_unpermute_combine share: expert_output [R, H],
/// destination_rows [T, k], output [T, H]. Returns false when there is no token (T == 0).
bool check_combine_arguments(const char* op, const void* expert_output, DType dtype,
                             const std::int32_t* destination_rows, std::int64_t num_tokens,
                             std::int64_t hidden, int top_k, const void* output);

/// Checks host_group_offsets [G + 1]: starts at 0, non-decreasing.
void check_group_offsets(const char* op, int num_groups, const std::int32_t* host_group_offsets,
                         std::int64_t k, std::int64_t n);

}  // namespace moescope::kernels::detail
