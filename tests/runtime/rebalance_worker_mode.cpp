// moe_ep_worker's "rebalance" mode: one rank of a skewed expert-parallel training run with
// redundant expert slots and an ExpertRebalancer. Around every applied migration it checks that
// the layer computes the same outputs and gradients and that Adam's state moved with the
// weights; rank 0 reports the measured max/mean rows per rank before the first and after the
// last migration. Lines: "MIGRATION rank=... step=... output_diff=... input_grad_diff=...
// weight_grad_diff=... moved_grad_diff=... state_diff=... bytes_received=..." and
// "LOAD before=... after=... migrations=...".
#include <ATen/ATen.h>
#include <torch/optim/adam.h>

#include <chrono>
#include <iostream>

#include "moescope/runtime/expert_rebalancer.h"
#include "moescope/runtime/optimizer_state.h"
#include "worker_modes.h"

using namespace moescope::runtime;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() == 0 ? 0.0 : (a - b).abs().max().item<double>();
}

/// This rank's per-slot rows, gathered over the group and put in logical expert order (first
/// replica of each expert): [E, ...].
at::Tensor by_logical_expert(const at::Tensor& per_slot, const MoELayerImpl& layer) {
  const moescope::balancer::ExpertPlacement& placement = layer.expert_slots().placement();
  std::vector<int64_t> shape = per_slot.sizes().vec();
  shape[0] = placement.num_physical_experts;
  at::Tensor all = at::zeros(shape, per_slot.options());
  all.narrow(0, layer.first_local_expert(), layer.num_local_experts()).copy_(per_slot);
  all_reduce_sum(all, layer.group());
  std::vector<int64_t> first;
  for (int e = 0; e < placement.num_logical_experts; ++e)
    first.push_back(placement.log2phy(0, e)[0]);
  return all.index_select(0, at::tensor(first, at::kLong));
}

struct Snapshot {
  at::Tensor output, input_grad, weight_grad, exp_avg, exp_avg_sq;
  double packed_sync_diff = 0;  // sync_replica_gradients vs its halves around a caller's sum
};

/// Forward and backward on `input` with fresh gradients; everything in logical expert order.
/// The replicas' gradients are summed both ways: by sync_replica_gradients, and by its halves
/// with the sums packed behind other values in the caller's own all-reduce (as moe_train does).
Snapshot evaluate(MoELayer& layer, torch::optim::Adam& adam, const at::Tensor& input,
                  const at::Tensor& out_grad) {
  adam.zero_grad();
  at::Tensor x = input.clone().requires_grad_(true);
  const MoEOutput out = layer->forward(x);
  (out.output * out_grad).sum().backward();
  const at::Tensor raw_gate_up = layer->experts->w_gate_up.grad().clone();
  const at::Tensor raw_down = layer->experts->w_down.grad().clone();
  const at::Tensor partial = layer->replica_gradient_partial_sums();
  at::Tensor packed = at::cat({at::ones({3}, partial.options()), partial.reshape(-1)});
  all_reduce_sum(packed, layer->group());
  layer->take_replica_gradient_sums(packed.narrow(0, 3, partial.numel()).view(partial.sizes()));
  const at::Tensor packed_gate_up = layer->experts->w_gate_up.grad().clone();
  const at::Tensor packed_down = layer->experts->w_down.grad().clone();
  layer->experts->w_gate_up.mutable_grad().copy_(raw_gate_up);
  layer->experts->w_down.mutable_grad().copy_(raw_down);
  layer->sync_replica_gradients();
  const auto state = optimizer_state_tensors(adam, layer->experts->w_gate_up);
  Snapshot snapshot{out.output.detach(), x.grad(),
                    by_logical_expert(layer->experts->w_down.grad(), *layer),
                    by_logical_expert(state.at(0), *layer), by_logical_expert(state.at(1), *layer)};
  snapshot.packed_sync_diff = std::max(max_diff(packed_gate_up, layer->experts->w_gate_up.grad()),
                                       max_diff(packed_down, layer->experts->w_down.grad()));
  return snapshot;
}

/// max/mean of `rows` over the ranks of the group.
double rank_imbalance(int64_t rows, const ExpertParallelGroup& group) {
  at::Tensor per_rank = at::zeros({group.size()}, at::kDouble);
  per_rank[group.rank()] = static_cast<double>(rows);
  all_reduce_sum(per_rank, group);
  return (per_rank.max() / per_rank.mean()).item<double>();
}

}  // namespace

MoEConfig hot_expert_config(const ExpertParallelGroup& group) {
  MoEConfig config;
  config.hidden_size = 16;
  config.ffn_hidden_size = 12;
  config.num_experts = 8;
  config.top_k = 2;
  config.init_std = 0.3;
  config.num_redundant_experts = group.size();  // one spare slot per rank
  std::vector<double> skew = make_gate_skew(8, 3.0);
  config.gate_logit_skew.assign(skew.rbegin(), skew.rend());  // expert 7 hottest
  return config;
}

int run_rebalance(const ExpertParallelGroup& group) {
  const int64_t rank = group.rank();
  const MoEConfig config = hot_expert_config(group);
  torch::manual_seed(1234);  // the router is replicated: the same on every rank
  MoELayer layer(config, group);
  layer->to(at::kDouble);
  layer->router->gate_weight.requires_grad_(false);  // one routing function on every rank
  torch::optim::Adam adam(
      std::vector<at::Tensor>{layer->experts->w_gate_up, layer->experts->w_down},
      torch::optim::AdamOptions(1e-2));
  RebalancerOptions options;
  options.warmup_steps = 5;
  options.interval_steps = 10;
  options.imbalance_threshold = 1.05;
  // The earlier rule: these check what a move does (and repeat decisions exactly), not whether
  // it pays; the cost rule's measured times would make the moves depend on the machine's speed.
  options.rule = RebalanceRule::kImbalanceGain;
  ExpertRebalancer rebalancer({layer}, options, {&adam});

  const int kSteps = 36;
  std::vector<double> imbalance_per_step;
  int first_migration = -1, last_migration = -1, migrations = 0;
  for (int step = 0; step < kSteps; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + rank);
    const at::Tensor input = at::randn({48, config.hidden_size}, generator, at::kDouble);
    const at::Tensor out_grad = at::randn({48, config.hidden_size}, generator, at::kDouble);
    const auto start = std::chrono::steady_clock::now();
    adam.zero_grad();
    const MoEOutput out = layer->forward(input);
    (out.output * out_grad).sum().backward();
    layer->sync_replica_gradients();
    adam.step();
    imbalance_per_step.push_back(rank_imbalance(out.num_received_rows, group));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    const Snapshot before = evaluate(layer, adam, input, out_grad);
    for (const RebalanceDecision& decision : rebalancer.after_step(step, seconds)) {
      std::cout << "DECISION rank=" << rank << " step=" << step
                << " before=" << decision.imbalance_before << " after=" << decision.imbalance_after
                << " applied=" << decision.applied << std::endl;
      if (!decision.applied) continue;
      ++migrations;
      if (first_migration < 0) first_migration = step;
      last_migration = step;
      const at::Tensor moved_grad = by_logical_expert(layer->experts->w_down.grad(), *layer);
      const Snapshot after = evaluate(layer, adam, input, out_grad);
      const double state_diff = std::max(max_diff(after.exp_avg, before.exp_avg),
                                         max_diff(after.exp_avg_sq, before.exp_avg_sq));
      std::cout << "MIGRATION rank=" << rank << " step=" << step
                << " output_diff=" << max_diff(after.output, before.output)
                << " input_grad_diff=" << max_diff(after.input_grad, before.input_grad)
                << " weight_grad_diff=" << max_diff(after.weight_grad, before.weight_grad)
                << " moved_grad_diff=" << max_diff(moved_grad, before.weight_grad)
                << " state_diff=" << state_diff
                << " packed_sync_diff=" << std::max(before.packed_sync_diff, after.packed_sync_diff)
                << " bytes_received=" << decision.change.migration.bytes_received
                << " group_moves=" << decision.change.moves << std::endl;
    }
  }
  if (rank == 0 && first_migration >= 0) {
    double before = 0, after = 0;
    for (int s = 0; s <= first_migration; ++s) before += imbalance_per_step[s];
    for (int s = last_migration + 1; s < kSteps; ++s) after += imbalance_per_step[s];
    std::cout << "LOAD before=" << before / (first_migration + 1)
              << " after=" << after / (kSteps - last_migration - 1) << " migrations=" << migrations
              << std::endl;
  }
  return 0;
}
