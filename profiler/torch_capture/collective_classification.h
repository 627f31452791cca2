// What a c10d operator is, from its name and argument names alone (no torch types), so the
// torch-facing kernel stays small and this part is unit-tested without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moescope::torch_capture {

// moescope_comm_kind of a c10d operator ("c10d::alltoall_base_" or "alltoall_base_"); 0 when
// the name says nothing known (recorded as kind 0, "unknown", with the operator's name).
uint32_t collective_kind(std::string_view operator_name);

// The torch.distributed name a user wrote for a c10d operator: "alltoall_base_" ->
// "all_to_all_single", "_allgather_base_" -> "all_gather_into_tensor"; unknown operators lose
// the "c10d::" prefix and trailing underscore.
std::string collective_display_name(std::string_view operator_name);

// Index into `argument_names` of the schema argument holding what this rank sends ("input",
// "input_tensors", "tensors", ...), or -1 when there is none. Barriers send nothing.
int sent_argument_index(uint32_t kind, const std::vector<std::string>& argument_names);
// Index of the argument receiving the result ("output", "output_tensors", ...), or -1.
int received_argument_index(const std::vector<std::string>& argument_names);

// Bytes this rank sends to each of `num_ranks` ranks in an all-to-all of `total_bytes` whose
// dim 0 has `rows` rows split as `split_rows` (torch's input_split_sizes: rows per rank; empty
// means an even split). Returns {} when the splits do not add up to `rows`.
std::vector<uint64_t> all_to_all_split_bytes(const std::vector<int64_t>& split_rows, int64_t rows,
                                             uint64_t total_bytes, int num_ranks);

// Communicator id of a process group: the same on every rank (FNV-1a of "name/backend").
uint64_t process_group_comm_id(std::string_view group_name, std::string_view backend);

}  // namespace moescope::torch_capture
