#include "moescope/runtime/expert_slots.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "moescope/balancer/layer_rebalance.h"

namespace moescope::runtime {

balancer::ExpertPlacement placement_layer(const balancer::ExpertPlacement& placement, int layer) {
  TORCH_CHECK(layer >= 0 && layer < placement.num_layers, "placement_layer: layer ", layer,
              " is outside the placement's ", placement.num_layers, " layers");
  const auto row = placement.phy2log(layer);
  return balancer::placement_from_physical_to_logical(1, placement.num_logical_experts,
                                                      placement.num_gpus, row);
}

balancer::ExpertPlacement ExpertSlots::initial_placement(int64_t num_experts, int64_t num_slots,
                                                         int64_t ep_size) {
  return balancer::initial_slot_placement(static_cast<int>(num_experts),
                                          static_cast<int>(num_slots), static_cast<int>(ep_size));
}

ExpertSlots::ExpertSlots(const balancer::ExpertPlacement& placement, int layer,
                         const at::Device& device) {
  try {
    placement_ = placement_layer(placement, layer);
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, "ExpertSlots: invalid placement: ", error.what());
  }
  const int64_t num_experts = placement_.num_logical_experts;
  const auto phy2log = placement_.phy2log(0);
  is_identity_ = placement_.num_physical_experts == num_experts;
  for (int64_t s = 0; is_identity_ && s < num_experts; ++s) is_identity_ = phy2log[s] == s;

  const int64_t max_replicas = placement_.max_replicas;
  std::vector<int64_t> replicas(static_cast<size_t>(num_experts * max_replicas), -1);
  std::vector<int64_t> counts(static_cast<size_t>(num_experts), 0);
  for (int64_t e = 0; e < num_experts; ++e) {
    const auto slots = placement_.log2phy(0, static_cast<int>(e));
    for (int64_t r = 0; r < max_replicas; ++r) replicas[e * max_replicas + r] = slots[r];
    counts[e] = placement_.logcnt(0)[e];
    if (counts[e] > 1) ++num_replicated_experts_;
  }
  const auto options = at::TensorOptions().dtype(at::kLong);
  replicas_of_expert_ = at::tensor(replicas, options).view({num_experts, max_replicas}).to(device);
  replica_count_ = at::tensor(counts, options).to(device);
}

at::Tensor ExpertSlots::route_to_slots(const at::Tensor& top_k_indices, int64_t rank) const {
  if (is_identity_ || top_k_indices.numel() == 0) return top_k_indices;
  // The n-th assignment (in token order) to expert e goes to replica (n + rank) % count[e]:
  // replicas get equal shares (within one row), whatever pattern the router's choices have.
  const at::Tensor experts = top_k_indices.reshape({-1});
  const int64_t num_experts = replica_count_.size(0);
  const at::Tensor order = std::get<1>(at::sort(experts, std::optional<bool>(true), 0, false));
  const at::Tensor per_expert = at::bincount(experts, {}, num_experts);
  const at::Tensor first_of_expert = per_expert.cumsum(0) - per_expert;
  const at::Tensor sorted_experts = experts.index_select(0, order);
  at::Tensor nth = at::empty_like(experts);
  nth.index_put_({order}, at::arange(experts.numel(), experts.options()) -
                              first_of_expert.index_select(0, sorted_experts));
  const at::Tensor replica = (nth + rank).remainder(replica_count_.index_select(0, experts));
  return replicas_of_expert_.index({experts, replica}).view(top_k_indices.sizes());
}

std::vector<int32_t> ExpertSlots::local_slot_experts(int64_t rank) const {
  const int64_t per_rank = slots_per_rank();
  const auto phy2log = placement_.phy2log(0);
  return {phy2log.begin() + rank * per_rank, phy2log.begin() + (rank + 1) * per_rank};
}

std::vector<int64_t> ExpertSlots::local_replica_group(int64_t rank) const {
  const auto counts = placement_.logcnt(0);
  std::vector<int64_t> group_of_expert(counts.size(), -1);
  int64_t next = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] > 1) group_of_expert[e] = next++;
  }
  std::vector<int64_t> groups;
  for (int32_t expert : local_slot_experts(rank)) groups.push_back(group_of_expert[expert]);
  return groups;
}

}  // namespace moescope::runtime
