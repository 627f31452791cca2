// The load each GPU carries under a placement (or under none), and its max and mean.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "moescope/balancer/expert_placement.h"

namespace moescope::balancer {

std::vector<double> gpu_loads_of_placement(std::span<const double> loads,
                                           const ExpertPlacement& placement, int layer) {
  if (loads.size() != static_cast<size_t>(placement.num_logical_experts)) {
    throw std::invalid_argument("gpu_loads_of_placement: loads has " +
                                std::to_string(loads.size()) + " experts, the placement " +
                                std::to_string(placement.num_logical_experts));
  }
  if (layer < 0 || layer >= placement.num_layers) {
    throw std::invalid_argument("gpu_loads_of_placement: layer " + std::to_string(layer) +
                                " out of range [0, " + std::to_string(placement.num_layers) + ")");
  }
  std::vector<double> gpu_load(static_cast<size_t>(placement.num_gpus), 0.0);
  const auto phy2log = placement.phy2log(layer);
  const auto logcnt = placement.logcnt(layer);
  const int slots_per_gpu = placement.slots_per_gpu();
  for (size_t slot = 0; slot < phy2log.size(); ++slot) {
    const auto expert = static_cast<size_t>(phy2log[slot]);
    gpu_load[slot / static_cast<size_t>(slots_per_gpu)] += loads[expert] / logcnt[expert];
  }
  return gpu_load;
}

std::vector<double> gpu_loads_without_replicas(std::span<const double> loads, int num_gpus) {
  if (num_gpus <= 0) {
    throw std::invalid_argument("gpu_loads_without_replicas: num_gpus must be positive, got " +
                                std::to_string(num_gpus));
  }
  std::vector<double> gpu_load(static_cast<size_t>(num_gpus), 0.0);
  const size_t num_experts = loads.size();
  for (size_t expert = 0; expert < num_experts; ++expert) {
    gpu_load[expert * static_cast<size_t>(num_gpus) / num_experts] += loads[expert];
  }
  return gpu_load;
}

GpuLoadBalance summarize_gpu_loads(std::span<const double> gpu_loads) {
  GpuLoadBalance balance;
  if (gpu_loads.empty()) return balance;
  double total = 0.0;
  for (double load : gpu_loads) {
    total += load;
    balance.max_gpu_load = std::max(balance.max_gpu_load, load);
  }
  balance.mean_gpu_load = total / static_cast<double>(gpu_loads.size());
  return balance;
}

}  // namespace moescope::balancer
