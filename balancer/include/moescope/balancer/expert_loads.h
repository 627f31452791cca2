// Per-layer expert loads, the input of the placement planner, and reading them from files.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moescope::balancer {

/// Loads of a model's MoE layers: [num_layers, num_experts], row-major. A load is any
/// non-negative measure of work (tokens per step, a predicted mean, ...).
struct ExpertLoads {
  int num_layers = 0;
  int num_experts = 0;
  std::vector<double> values;  // [num_layers * num_experts]

  /// One layer's loads: [num_experts].
  std::span<const double> layer(int layer_index) const {
    return std::span<const double>(values).subspan(
        static_cast<size_t>(layer_index) * static_cast<size_t>(num_experts),
        static_cast<size_t>(num_experts));
  }
};

/// Parses loads from JSON: `[[l0e0, l0e1, ...], [l1e0, ...]]` (layers x experts), a flat
/// `[e0, e1, ...]` for a single layer, or either under `{"loads": ...}`. Every layer must have
/// the same number of experts and every load must be a finite, non-negative number.
/// Throws std::runtime_error starting with `source_name` and naming the layer/expert at fault.
ExpertLoads parse_expert_loads_json(std::string_view text, std::string_view source_name);

/// Parses loads from CSV: one layer per row, one expert per column, comma separated. Blank
/// lines and lines starting with '#' are skipped; a first row without any number is a header.
/// Throws std::runtime_error with `source_name`, line and column on bad input.
ExpertLoads parse_expert_loads_csv(std::string_view text, std::string_view source_name);

/// Reads a JSON or CSV loads file, chosen by content (JSON starts with '[' or '{').
/// Throws std::runtime_error naming the path when it cannot be read or parsed.
ExpertLoads read_expert_loads_file(const std::string& path);

}  // namespace moescope::balancer
