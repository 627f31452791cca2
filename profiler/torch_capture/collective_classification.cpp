// c10d operator names -> comm kinds and user-facing names (see collective_classification.h).
#include "collective_classification.h"

#include <algorithm>
#include <array>
#include <utility>

#include "moescope/recorder.h"

namespace moescope::torch_capture {
namespace {

std::string_view bare_name(std::string_view name) {
  constexpr std::string_view kNamespace = "c10d::";
  if (name.substr(0, kNamespace.size()) == kNamespace) name.remove_prefix(kNamespace.size());
  return name;
}

// The c10d operators of torch 2.x and what torch.distributed calls them.
constexpr std::array<std::pair<std::string_view, std::string_view>, 20> kDisplayNames{{
    {"allreduce_", "all_reduce"},
    {"allreduce_coalesced_", "all_reduce_coalesced"},
    {"broadcast_", "broadcast"},
    {"reduce_", "reduce"},
    {"_allgather_base_", "all_gather_into_tensor"},
    {"allgather_", "all_gather"},
    {"allgather_coalesced_", "all_gather_coalesced"},
    {"allgather_into_tensor_coalesced_", "all_gather_into_tensor_coalesced"},
    {"_reduce_scatter_base_", "reduce_scatter_tensor"},
    {"reduce_scatter_", "reduce_scatter"},
    {"reduce_scatter_tensor_coalesced_", "reduce_scatter_tensor_coalesced"},
    {"alltoall_base_", "all_to_all_single"},
    {"alltoall_", "all_to_all"},
    {"barrier", "barrier"},
    {"monitored_barrier_", "monitored_barrier"},
    {"gather_", "gather"},
    {"scatter_", "scatter"},
    {"send", "send"},
    {"recv_", "recv"},
    {"recv_any_source_", "recv_any_source"},
}};

}  // namespace

uint32_t collective_kind(std::string_view operator_name) {
  // Underscores removed, so "all_to_all", "alltoall" and "_allgather_base" read alike. Order
  // matters: the specific words before the ones they contain ("allreduce" holds "reduce").
  std::string name;
  for (char c : bare_name(operator_name)) {
    if (c != '_') name.push_back(c);
  }
  constexpr std::array<std::pair<std::string_view, uint32_t>, 11> kWords{{
      {"alltoall", MOESCOPE_COMM_ALL_TO_ALL},
      {"allgather", MOESCOPE_COMM_ALL_GATHER},
      {"reducescatter", MOESCOPE_COMM_REDUCE_SCATTER},
      {"allreduce", MOESCOPE_COMM_ALL_REDUCE},
      {"broadcast", MOESCOPE_COMM_BROADCAST},
      {"barrier", MOESCOPE_COMM_BARRIER},
      {"scatter", MOESCOPE_COMM_SCATTER},
      {"gather", MOESCOPE_COMM_GATHER},
      {"reduce", MOESCOPE_COMM_REDUCE},
      {"send", MOESCOPE_COMM_SEND},
      {"recv", MOESCOPE_COMM_RECV},
  }};
  for (const auto& [word, kind] : kWords) {
    if (name.find(word) != std::string::npos) return kind;
  }
  return 0;
}

std::string collective_display_name(std::string_view operator_name) {
  std::string_view name = bare_name(operator_name);
  for (const auto& [op, display] : kDisplayNames) {
    if (op == name) return std::string(display);
  }
  if (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return std::string(name);
}

namespace {

int first_present(const std::vector<std::string>& names,
                  std::initializer_list<std::string_view> wanted) {
  for (std::string_view candidate : wanted) {
    auto found = std::find(names.begin(), names.end(), candidate);
    if (found != names.end()) return static_cast<int>(found - names.begin());
  }
  return -1;
}

}  // namespace

int sent_argument_index(uint32_t kind, const std::vector<std::string>& argument_names) {
  if (kind == MOESCOPE_COMM_BARRIER) return -1;  // its tensor is a placeholder
  return first_present(argument_names, {"input", "input_tensor", "input_tensors", "inputs",
                                        "input_list", "tensors", "tensor"});
}

int received_argument_index(const std::vector<std::string>& argument_names) {
  return first_present(argument_names, {"output", "output_tensor", "output_tensors", "outputs",
                                        "output_lists", "tensors"});
}

std::vector<uint64_t> all_to_all_split_bytes(const std::vector<int64_t>& split_rows, int64_t rows,
                                             uint64_t total_bytes, int num_ranks) {
  if (rows <= 0 || num_ranks <= 0) return {};
  const uint64_t row_bytes = total_bytes / static_cast<uint64_t>(rows);
  std::vector<uint64_t> bytes;
  if (split_rows.empty()) {
    if (rows % num_ranks != 0) return {};
    bytes.assign(static_cast<size_t>(num_ranks),
                 static_cast<uint64_t>(rows / num_ranks) * row_bytes);
    return bytes;
  }
  int64_t sum = 0;
  for (int64_t split : split_rows) {
    if (split < 0) return {};
    sum += split;
    bytes.push_back(static_cast<uint64_t>(split) * row_bytes);
  }
  if (sum != rows) return {};
  return bytes;
}

uint64_t process_group_comm_id(std::string_view group_name, std::string_view backend) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&hash](std::string_view text) {
    for (unsigned char c : text) {
      hash ^= c;
      hash *= 1099511628211ull;
    }
  };
  mix(group_name);
  mix("/");
  mix(backend);
  return hash;
}

}  // namespace moescope::torch_capture
