// CPU reference of the routing map: histogram, padded exclusive scan, destination rows.
#include <vector>

#include "argument_checks.h"
#include "moescope/kernels/cpu_reference.h"

namespace moescope::kernels::reference {

void build_routing_map(const std::int32_t* topk_ids, std::int64_t num_assignments, int num_experts,
                       int row_alignment, std::int32_t* tokens_per_expert,
                       std::int32_t* group_offsets, std::int32_t* destination_rows,
                       std::int32_t* row_sources, std::int64_t row_capacity) {
  constexpr const char* kOp = "build_routing_map";
  detail::check_routing_map_sizes(kOp, num_assignments, num_experts, row_alignment, row_capacity);
  if (num_assignments > 0) {
    detail::require_pointer(kOp, topk_ids, "topk_ids");
    detail::require_pointer(kOp, destination_rows, "destination_rows");
  }
  detail::require_pointer(kOp, tokens_per_expert, "tokens_per_expert");
  detail::require_pointer(kOp, group_offsets, "group_offsets");
  detail::require_pointer(kOp, row_sources, "row_sources");
  for (std::int64_t n = 0; n < num_assignments; ++n) {
    if (topk_ids[n] >= num_experts) {
      detail::fail_argument(kOp, "topk_ids[" + std::to_string(n) +
                                     "]=" + std::to_string(topk_ids[n]) +
                                     " >= num_experts=" + std::to_string(num_experts));
    }
  }

  for (int e = 0; e < num_experts; ++e) tokens_per_expert[e] = 0;
  for (std::int64_t n = 0; n < num_assignments; ++n) {
    if (topk_ids[n] >= 0) ++tokens_per_expert[topk_ids[n]];
  }
  group_offsets[0] = 0;
  for (int e = 0; e < num_experts; ++e) {
    const std::int32_t padded =
        (tokens_per_expert[e] + row_alignment - 1) / row_alignment * row_alignment;
    group_offsets[e + 1] = group_offsets[e] + padded;
  }
  for (std::int64_t r = 0; r < row_capacity; ++r) row_sources[r] = -1;
  std::vector<std::int32_t> next_row(group_offsets, group_offsets + num_experts);
  for (std::int64_t n = 0; n < num_assignments; ++n) {
    const std::int32_t expert = topk_ids[n];
    if (expert < 0) {
      destination_rows[n] = -1;
      continue;
    }
    const std::int32_t row = next_row[expert]++;
    destination_rows[n] = row;
    row_sources[row] = static_cast<std::int32_t>(n);
  }
}

}  // namespace moescope::kernels::reference
