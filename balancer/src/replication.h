// Replication: hand out physical slots to logical experts so that the largest load per replica
// is as small as possible.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moescope::balancer {

struct Replication {
  std::vector<int32_t> physical_to_logical;  // [num_physical]; slot i < num_logical holds i
  std::vector<int32_t> replica_rank;         // [num_physical]: which replica of its expert
  std::vector<int32_t> replica_count;        // [num_logical]
};

/// Every logical expert gets one replica; each extra slot goes to the expert with the highest
/// load per replica (ties to the lower index). This greedy minimises the maximum load per
/// replica. Requires num_physical >= loads.size() (checked by the caller).
Replication replicate_experts(std::span<const double> loads, int num_physical);

}  // namespace moescope::balancer
