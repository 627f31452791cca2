#include "moescope/runtime/slot_migration.h"

#include <ATen/ATen.h>

#include <map>

namespace moescope::runtime {
namespace {

/// Which rows move where, from this rank's point of view.
struct RowExchange {
  std::vector<int64_t> send_slots;      // local slot rows to send, destination-major
  std::vector<int64_t> send_splits;     // [ep_size]
  std::vector<int64_t> recv_splits;     // [ep_size]
  std::vector<int64_t> new_row_source;  // [S_local] index into cat(old rows, received rows)
  int64_t slots_changed = 0;
};

RowExchange plan_rows(const balancer::ExpertPlacement& current,
                      const balancer::ExpertMigration& migration, int64_t rank, int64_t ep_size) {
  const balancer::ExpertPlacement& target = migration.placement;
  const int64_t per_rank = current.slots_per_gpu();
  TORCH_CHECK(target.num_layers == 1 && current.num_layers == 1,
              "migrate_slot_tensors: placements must have one layer, got ", current.num_layers,
              " and ", target.num_layers);
  TORCH_CHECK(current.num_gpus == ep_size && target.num_gpus == ep_size,
              "migrate_slot_tensors: placements are over ", current.num_gpus, " and ",
              target.num_gpus, " GPUs but the group has ", ep_size, " ranks");
  TORCH_CHECK(target.slots_per_gpu() == per_rank, "migrate_slot_tensors: the new placement has ",
              target.slots_per_gpu(), " slots per rank, the tensors ", per_rank);
  const auto old_slots = current.phy2log(0).subspan(static_cast<size_t>(rank * per_rank),
                                                    static_cast<size_t>(per_rank));
  const auto new_slots = target.phy2log(0).subspan(static_cast<size_t>(rank * per_rank),
                                                   static_cast<size_t>(per_rank));
  std::map<int32_t, int64_t> old_row_of_expert;  // first local slot holding each expert
  for (int64_t j = per_rank - 1; j >= 0; --j) old_row_of_expert[old_slots[j]] = j;

  RowExchange exchange;
  exchange.send_splits.assign(static_cast<size_t>(ep_size), 0);
  exchange.recv_splits.assign(static_cast<size_t>(ep_size), 0);
  // Moves are ordered by destination, so the send rows come out destination-major. Received
  // rows arrive source-major; within one source in move order, which is the sender's order too.
  std::vector<std::vector<int32_t>> received_from(static_cast<size_t>(ep_size));
  for (const balancer::ExpertMove& move : migration.moves) {
    if (move.layer != 0) continue;
    if (move.from_gpu == rank) {
      const auto found = old_row_of_expert.find(move.logical_expert);
      TORCH_CHECK(found != old_row_of_expert.end(), "migrate_slot_tensors: rank ", rank,
                  " is asked to send expert ", move.logical_expert, " which it does not hold");
      exchange.send_slots.push_back(found->second);
      ++exchange.send_splits[static_cast<size_t>(move.to_gpu)];
    }
    if (move.to_gpu == rank) {
      received_from[static_cast<size_t>(move.from_gpu)].push_back(move.logical_expert);
      ++exchange.recv_splits[static_cast<size_t>(move.from_gpu)];
    }
  }
  std::map<int32_t, int64_t> received_row_of_expert;
  int64_t next = per_rank;
  for (const auto& experts : received_from) {
    for (int32_t expert : experts) received_row_of_expert.emplace(expert, next++);
  }
  for (int64_t j = 0; j < per_rank; ++j) {
    const int32_t expert = new_slots[j];
    if (expert != old_slots[j]) ++exchange.slots_changed;
    if (const auto local = old_row_of_expert.find(expert); local != old_row_of_expert.end()) {
      exchange.new_row_source.push_back(local->second);
    } else if (const auto received = received_row_of_expert.find(expert);
               received != received_row_of_expert.end()) {
      exchange.new_row_source.push_back(received->second);
    } else {
      TORCH_CHECK(false, "migrate_slot_tensors: rank ", rank, " slot ", j, " needs expert ", expert,
                  " but holds it nowhere and no move brings it");
    }
  }
  return exchange;
}

}  // namespace

SlotMigrationResult migrate_slot_tensors(const std::vector<at::Tensor>& per_slot_tensors,
                                         const balancer::ExpertPlacement& current,
                                         const balancer::ExpertMigration& migration,
                                         const ExpertParallelGroup& group) {
  const RowExchange exchange = plan_rows(current, migration, group.rank(), group.size());
  const int64_t per_rank = current.slots_per_gpu();
  SlotMigrationResult result;
  result.slots_changed = exchange.slots_changed;
  for (int64_t count : exchange.recv_splits) result.experts_received += count;

  at::NoGradGuard no_grad;
  for (size_t i = 0; i < per_slot_tensors.size(); ++i) {
    at::Tensor tensor = per_slot_tensors[i];
    TORCH_CHECK(tensor.defined() && tensor.dim() >= 1 && tensor.size(0) == per_rank,
                "migrate_slot_tensors: tensor ", i, " must be [", per_rank, " slots, ...], got ",
                tensor.defined() ? tensor.sizes() : at::IntArrayRef{});
    const auto index_options = at::TensorOptions().dtype(at::kLong).device(tensor.device());
    at::Tensor received;
    if (group.is_distributed()) {
      const at::Tensor send =
          tensor.index_select(0, at::tensor(exchange.send_slots, index_options));
      received = all_to_all_rows(send, exchange.send_splits, exchange.recv_splits, group,
                                 "a2a.expert_migration");
      const int64_t row_bytes = tensor[0].numel() * static_cast<int64_t>(tensor.element_size());
      result.bytes_sent += send.size(0) * row_bytes;
      result.bytes_received += received.size(0) * row_bytes;
    } else {
      received = tensor.narrow(0, 0, 0);
    }
    const at::Tensor rows = at::cat({tensor, received}, 0);
    tensor.copy_(rows.index_select(0, at::tensor(exchange.new_row_source, index_options)));
  }
  return result;
}

}  // namespace moescope::runtime
