#include "moescope/runtime/moe_layer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <stdexcept>

#include "moescope/recorder.h"
#include "moescope/runtime/host_transfers.h"
#include "moescope/runtime/moe_instrumentation.h"
#include "moescope/runtime/optimizer_state.h"
#include "moescope/runtime/receive_cap.h"
#include "moescope/runtime/token_dispatcher.h"

namespace moescope::runtime {
namespace {

// The layer's answer for `output` [num_tokens, hidden_size], shaped like `hidden`, with the
// routing's losses and counts (forward and the loop oracle alike).
MoEOutput layer_output(const at::Tensor& output, const at::Tensor& hidden, const at::Tensor& tokens,
                       const RoutingResult& routing, const CapacityResult& capacity) {
  MoEOutput result;
  result.output = output.view(hidden.sizes());
  result.aux_loss = routing.losses.total(tokens.options());
  result.losses = routing.losses;
  result.tokens_per_expert = routing.tokens_per_expert;
  result.num_dropped = capacity.num_dropped;
  return result;
}

}  // namespace

MoELayerImpl::MoELayerImpl(const MoEConfig& config, ExpertParallelGroup group)
    : config_(config), group_(std::move(group)) {
  validate_moe_config(config_, group_.size());
  router = register_module("router", Router(config_));
  experts = register_module("experts", GroupedExperts(num_local_experts(), config_.hidden_size,
                                                      config_.ffn_hidden_size, config_.init_std));
  if (config_.num_shared_experts > 0) {
    const int64_t width = config_.num_shared_experts * (config_.shared_ffn_hidden_size > 0
                                                            ? config_.shared_ffn_hidden_size
                                                            : config_.ffn_hidden_size);
    shared_experts = register_module(
        "shared_experts", GroupedExperts(1, config_.hidden_size, width, config_.init_std));
    shared_experts->use_fused_kernels = config_.use_fused_kernels;
    shared_experts->recompute_activation = config_.recompute_expert_activation;
  }
  experts->use_fused_kernels = config_.use_fused_kernels;
  experts->recompute_activation = config_.recompute_expert_activation;
  accumulated_load =
      register_buffer("accumulated_load", at::zeros({config_.num_experts}, at::kLong));
  slots_ = ExpertSlots(
      ExpertSlots::initial_placement(config_.num_experts, num_expert_slots(config_), group_.size()),
      0, at::kCPU);
  // Replicas start as copies of their expert's first replica (a collective over the group).
  reduce_over_replicas({experts->w_gate_up, experts->w_down}, /*first_replica_only=*/true);
}

const ExpertSlots& MoELayerImpl::slots_on(const at::Device& device) {
  if (slots_.replica_count().device() != device)
    slots_ = ExpertSlots(slots_.placement(), 0, device);
  return slots_;
}

void MoELayerImpl::check_input(const at::Tensor& hidden) const {
  TORCH_CHECK(hidden.defined(), "MoELayer: input hidden states are undefined");
  TORCH_CHECK(hidden.dim() == 2 || hidden.dim() == 3,
              "MoELayer: input must be [num_tokens, hidden] or [batch, seq, hidden], got ",
              hidden.sizes());
  TORCH_CHECK(hidden.size(-1) == config_.hidden_size, "MoELayer: input hidden size ",
              hidden.size(-1), " does not match MoEConfig.hidden_size ", config_.hidden_size);
  TORCH_CHECK(at::isFloatingType(hidden.scalar_type()),
              "MoELayer: input dtype must be floating point, got ", hidden.scalar_type());
  TORCH_CHECK(hidden.scalar_type() == experts->w_gate_up.scalar_type(), "MoELayer: input dtype ",
              hidden.scalar_type(), " does not match the expert weights' dtype ",
              experts->w_gate_up.scalar_type(), " (convert the input or the module)");
  TORCH_CHECK(hidden.device() == experts->w_gate_up.device(), "MoELayer: input is on ",
              hidden.device(), " but the expert weights are on ", experts->w_gate_up.device());
}

RoutingResult MoELayerImpl::route(const at::Tensor& tokens, int64_t sequence_length) {
  PhaseRange range(MoEPhase::kRoute);
  std::optional<at::Tensor> replayed;
  if (replay_ && replay_->mode() == RoutingReplay::Mode::kReplay) {
    replayed = replay_->replay(config_.layer_index);
  }
  RoutingResult routing = router->forward(tokens, sequence_length, replayed);
  if (replay_ && replay_->mode() == RoutingReplay::Mode::kRecord) {
    replay_->record(config_.layer_index, routing.top_k_indices);
  }
  if (config_.enable_expert_bias && is_training()) {
    accumulated_load.add_(routing.tokens_per_expert.to(accumulated_load.device()));
  }
  return routing;
}

at::Tensor MoELayerImpl::add_shared_experts(const at::Tensor& routed_output,
                                            const at::Tensor& tokens, bool use_oracle) {
  if (!shared_experts) return routed_output;
  PhaseRange range(MoEPhase::kSharedExperts);
  const at::Tensor shared =
      use_oracle ? swiglu_expert(tokens, shared_experts->w_gate_up[0], shared_experts->w_down[0])
                 : shared_experts->forward(tokens, {tokens.size(0)});
  return routed_output + shared;
}

MoEOutput MoELayerImpl::forward(const at::Tensor& hidden) {
  check_input(hidden);
  PhaseRange layer_range(MoEPhase::kLayer);
  const int64_t sequence_length = hidden.dim() == 3 ? hidden.size(1) : 0;
  const at::Tensor tokens = hidden.reshape({-1, config_.hidden_size});
  const int64_t num_tokens = tokens.size(0);

  // ---- route
  RoutingResult routing = route(tokens, sequence_length);
  last_tokens_per_expert_ = routing.tokens_per_expert;

  // ---- dispatch: capacity, permute into expert order, send rows to the experts' ranks
  CapacityResult capacity;
  CapacityResult receive_cap;
  DispatchPlan plan;
  at::Tensor rows;
  DispatchBufferPool* pool = group_.is_distributed() ? pool_for(tokens) : nullptr;
  {
    PhaseRange range(MoEPhase::kPermute);
    const int64_t capacity_per_expert = expert_capacity(config_, num_tokens);
    if (capacity_per_expert >= 0) {
      capacity =
          apply_expert_capacity(routing.top_k_indices, routing.top_k_weights, config_.num_experts,
                                capacity_per_expert, config_.drop_policy);
    }
    // Capacity counts logical experts; rows go to physical slots (a replica of the expert).
    const at::Tensor slot_indices =
        slots_on(tokens.device()).route_to_slots(routing.top_k_indices, group_.rank());
    at::Tensor keep_mask = capacity.keep_mask;
    if (config_.receive_cap_rows > 0) {
      receive_cap = apply_receive_cap(slot_indices, keep_mask, routing.top_k_weights);
      keep_mask = receive_cap.keep_mask;
    }
    plan = build_dispatch_plan(slot_indices, keep_mask, num_expert_slots(config_),
                               config_.use_fused_kernels);
    // Rows only travel (nothing saves them for backward) when the experts are elsewhere.
    rows = permute_tokens(tokens, plan, pool, DispatchBufferKind::kDispatchSend);
  }

  at::Tensor expert_rows = rows;
  std::vector<int64_t> rows_per_local_expert = plan.rows_per_expert;
  ExpertParallelPlan ep_plan;
  if (group_.is_distributed()) {
    PhaseRange range(MoEPhase::kDispatchAllToAll);
    ep_plan = plan_expert_parallel(plan.rows_per_expert, group_, tokens.device());
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor received = all_to_all_rows(rows, ep_plan.send_splits, ep_plan.recv_splits,
                                                group_, "a2a.dispatch", pool);
    if (received.device().is_cpu()) {
      cost_samples_.dispatch.add(
          static_cast<double>(received.numel()) * static_cast<double>(received.element_size()),
          milliseconds_since(start));
    }
    expert_rows = permute_tokens(received, ep_plan.source_to_expert_order);
    rows_per_local_expert = ep_plan.rows_per_local_expert;
  }

  // ---- compute
  at::Tensor expert_output;
  {
    PhaseRange range(MoEPhase::kExperts);
    const auto start = std::chrono::steady_clock::now();
    expert_output = experts->forward(expert_rows, rows_per_local_expert);  // [R_local, H]
    if (expert_rows.device().is_cpu()) {
      cost_samples_.expert_compute.add(static_cast<double>(expert_rows.size(0)),
                                       milliseconds_since(start));
    }
  }

  // ---- combine: rows back home, weighted sum into tokens, shared experts
  at::Tensor returned_rows = expert_output;
  if (group_.is_distributed()) {
    PhaseRange range(MoEPhase::kCombineAllToAll);
    const at::Tensor source_ordered = permute_tokens(expert_output, ep_plan.expert_to_source_order,
                                                     pool, DispatchBufferKind::kCombineSend);
    returned_rows = all_to_all_rows(source_ordered, ep_plan.recv_splits, ep_plan.send_splits,
                                    group_, "a2a.combine");
  }
  at::Tensor output;
  {
    PhaseRange range(MoEPhase::kUnpermute);
    output = combine_tokens(returned_rows, routing.top_k_weights, plan);
  }
  output = add_shared_experts(output, tokens, /*use_oracle=*/false);

  if (is_trace_recording()) {
    LayerStepReport report;
    report.layer = config_.layer_index;
    report.rank = group_.rank();
    report.statistics.tokens_per_expert = routing.tokens_per_expert;
    report.statistics.scores = routing.scores.detach();
    report.statistics.logits = routing.logits.detach();
    report.statistics.expert_output = expert_output.detach();
    report.statistics.aux_loss = routing.losses.aux_loss;
    report.statistics.z_loss = routing.losses.z_loss;
    if (config_.enable_expert_bias) report.statistics.expert_bias = router->expert_bias;
    // Already on the host (the grouped GEMM and the all-to-all needed them): no copy.
    report.received_tokens_per_expert = rows_per_local_expert;
    report.num_dropped = capacity.num_dropped + receive_cap.num_dropped;
    report.global_scope = !group_.is_distributed();
    trace_statistics_.record_layer_step(report);
  } else {
    trace_statistics_.poll();  // statistics still in flight from a recording that stopped
  }

  MoEOutput result = layer_output(output, hidden, tokens, routing, capacity);
  result.num_received_rows = expert_rows.size(0);
  result.num_dropped_by_receive_cap = receive_cap.num_dropped;
  return result;
}

MoEOutput MoELayerImpl::forward_loop_oracle(const at::Tensor& hidden) {
  check_input(hidden);
  TORCH_CHECK(!group_.is_distributed(),
              "MoELayer::forward_loop_oracle runs in one process only (the layer is spread over ",
              group_.size(), " ranks)");
  const int64_t sequence_length = hidden.dim() == 3 ? hidden.size(1) : 0;
  const at::Tensor tokens = hidden.reshape({-1, config_.hidden_size});
  RoutingResult routing = route(tokens, sequence_length);
  CapacityResult capacity;
  const int64_t capacity_per_expert = expert_capacity(config_, tokens.size(0));
  if (capacity_per_expert >= 0) {
    capacity = apply_expert_capacity(routing.top_k_indices, routing.top_k_weights,
                                     config_.num_experts, capacity_per_expert, config_.drop_policy);
  }
  // The oracle reads each logical expert's weights from its first replica.
  at::Tensor w_gate_up = experts->w_gate_up, w_down = experts->w_down;
  if (!slots_.is_identity()) {
    std::vector<int64_t> first_replica;
    for (int64_t e = 0; e < config_.num_experts; ++e) {
      first_replica.push_back(slots_.placement().log2phy(0, static_cast<int>(e))[0]);
    }
    const at::Tensor index = at::tensor(first_replica, at::kLong).to(w_gate_up.device());
    w_gate_up = w_gate_up.index_select(0, index);
    w_down = w_down.index_select(0, index);
  }
  at::Tensor output = swiglu_experts_loop_oracle(
      tokens, routing.top_k_indices, routing.top_k_weights, capacity.keep_mask, w_gate_up, w_down);
  output = add_shared_experts(output, tokens, /*use_oracle=*/true);
  return layer_output(output, hidden, tokens, routing, capacity);
}

void MoELayerImpl::update_expert_bias() {
  at::Tensor load = expert_bias_partial_load();
  all_reduce_sum(load, group_, "ar.expert_bias_load");
  update_expert_bias_from(load);
}

at::Tensor MoELayerImpl::expert_bias_partial_load() const {
  TORCH_CHECK(config_.enable_expert_bias, "MoELayer::update_expert_bias: layer ",
              config_.layer_index, " was built with MoEConfig.enable_expert_bias = false");
  return accumulated_load.clone();
}

void MoELayerImpl::update_expert_bias_from(const at::Tensor& summed_load) {
  at::NoGradGuard no_grad;
  router->update_expert_bias(summed_load);
  accumulated_load.zero_();
  trace_statistics_.record_expert_bias(config_.layer_index, group_.rank(), router->expert_bias);
}

void MoELayerImpl::load_full_expert_weights(const at::Tensor& w_gate_up, const at::Tensor& w_down) {
  const int64_t num_experts = config_.num_experts;
  TORCH_CHECK(w_gate_up.dim() == 3 && w_gate_up.size(0) == num_experts &&
                  w_gate_up.size(1) == config_.hidden_size &&
                  w_gate_up.size(2) == 2 * config_.ffn_hidden_size,
              "load_full_expert_weights: w_gate_up must be [", num_experts, ", ",
              config_.hidden_size, ", ", 2 * config_.ffn_hidden_size, "], got ", w_gate_up.sizes());
  TORCH_CHECK(w_down.dim() == 3 && w_down.size(0) == num_experts &&
                  w_down.size(1) == config_.ffn_hidden_size &&
                  w_down.size(2) == config_.hidden_size,
              "load_full_expert_weights: w_down must be [", num_experts, ", ",
              config_.ffn_hidden_size, ", ", config_.hidden_size, "], got ", w_down.sizes());
  at::NoGradGuard no_grad;
  const std::vector<int32_t> local = slots_.local_slot_experts(group_.rank());
  const at::Tensor index = at::tensor(std::vector<int64_t>(local.begin(), local.end()), at::kLong)
                               .to(w_gate_up.device());
  experts->w_gate_up.copy_(w_gate_up.index_select(0, index));
  experts->w_down.copy_(w_down.index_select(0, index.to(w_down.device())));
}

namespace {

// Which local slots hold a replicated expert, and the replica group (0..R-1) of each.
struct LocalReplicas {
  std::vector<int64_t> slots, groups;              // every local replica
  std::vector<int64_t> first_slots, first_groups;  // only the expert's first replica
};

LocalReplicas local_replicas(const ExpertSlots& slots, int64_t rank, int64_t first_local_slot) {
  LocalReplicas local;
  const std::vector<int64_t> group_of_slot = slots.local_replica_group(rank);
  const auto& placement = slots.placement();
  for (size_t j = 0; j < group_of_slot.size(); ++j) {
    if (group_of_slot[j] < 0) continue;
    const int64_t slot = first_local_slot + static_cast<int64_t>(j);
    local.slots.push_back(static_cast<int64_t>(j));
    local.groups.push_back(group_of_slot[j]);
    if (placement.log2phy(0, placement.phy2log(0)[slot])[0] == slot) {
      local.first_slots.push_back(static_cast<int64_t>(j));
      local.first_groups.push_back(group_of_slot[j]);
    }
  }
  return local;
}

at::Tensor index_tensor(const std::vector<int64_t>& values, const at::Device& device) {
  return at::tensor(values, at::kLong).to(device);
}

}  // namespace

at::Tensor MoELayerImpl::replica_partial_sums(const std::vector<at::Tensor>& per_slot,
                                              bool first_replica_only) const {
  at::NoGradGuard no_grad;
  const LocalReplicas local = local_replicas(slots_, group_.rank(), first_local_expert());
  const std::vector<int64_t>& sources = first_replica_only ? local.first_slots : local.slots;
  const std::vector<int64_t>& groups = first_replica_only ? local.first_groups : local.groups;
  std::vector<at::Tensor> columns;
  for (const at::Tensor& tensor : per_slot) {
    at::Tensor sums =
        at::zeros({slots_.num_replicated_experts(), tensor[0].numel()}, tensor.options());
    sums.index_add_(0, index_tensor(groups, tensor.device()),
                    tensor.index_select(0, index_tensor(sources, tensor.device())).flatten(1));
    columns.push_back(sums);
  }
  return at::cat(columns, 1);
}

void MoELayerImpl::write_replica_sums(const std::vector<at::Tensor>& per_slot,
                                      const at::Tensor& summed) const {
  at::NoGradGuard no_grad;
  const LocalReplicas local = local_replicas(slots_, group_.rank(), first_local_expert());
  int64_t column = 0;
  for (const at::Tensor& tensor : per_slot) {
    const int64_t width = tensor[0].numel();
    std::vector<int64_t> shape = tensor.sizes().vec();
    shape[0] = static_cast<int64_t>(local.slots.size());
    const at::Tensor rows = summed.narrow(1, column, width)
                                .index_select(0, index_tensor(local.groups, summed.device()))
                                .reshape(shape);
    tensor.index_copy_(0, index_tensor(local.slots, tensor.device()),
                       rows.to(tensor.device(), tensor.scalar_type()));
    column += width;
  }
}

void MoELayerImpl::reduce_over_replicas(const std::vector<at::Tensor>& per_slot,
                                        bool first_replica_only) {
  if (slots_.num_replicated_experts() == 0) return;
  at::Tensor sums = replica_partial_sums(per_slot, first_replica_only);
  const auto start = std::chrono::steady_clock::now();
  all_reduce_sum(sums, group_, "ar.replica_sync");
  if (sums.device().is_cpu() && group_.is_distributed()) {
    cost_samples_.all_reduce.add(
        static_cast<double>(sums.numel()) * static_cast<double>(sums.element_size()),
        milliseconds_since(start));
  }
  write_replica_sums(per_slot, sums);
}

DispatchBufferPool* MoELayerImpl::pool_for(const at::Tensor& like) {
  if (!config_.use_dispatch_buffer_pool) return nullptr;
  if (!pool_ || pool_->options().dtype != like.scalar_type() ||
      pool_->options().device != like.device()) {
    DispatchBufferPoolOptions options;
    options.hidden_size = config_.hidden_size;
    options.dtype = like.scalar_type();
    options.device = like.device();
    options.headroom = config_.dispatch_buffer_headroom;
    pool_ = std::make_unique<DispatchBufferPool>(options);
  }
  return pool_.get();
}

void MoELayerImpl::reserve_dispatch_buffers(double predicted_max_rank_rows) {
  if (pool_) pool_->reserve_for_predicted_load(predicted_max_rank_rows);
}

CapacityResult MoELayerImpl::apply_receive_cap(const at::Tensor& slot_indices,
                                               const at::Tensor& keep_mask,
                                               const at::Tensor& weights) {
  const int64_t ep_size = group_.size(), rank = group_.rank();
  const int64_t cap = config_.receive_cap_rows;
  // Destination rank of every assignment; already dropped ones go to group ep_size (quota 0).
  at::Tensor destination = at::div(slot_indices, num_local_experts(), "floor");
  int64_t already_dropped = 0;
  if (keep_mask.defined()) {
    destination = at::where(keep_mask, destination, ep_size);
    already_dropped = keep_mask.numel() - read_scalar(keep_mask.sum()).to<int64_t>();
  }
  at::Tensor sent = at::zeros({ep_size, ep_size}, at::kLong);  // [source, destination]
  sent[rank] =
      copy_to_host(at::bincount(destination.flatten(), {}, ep_size + 1).narrow(0, 0, ep_size));
  sent = copy_to_host(all_reduce_sum(sent.to(slot_indices.device()), group_, "ar.receive_cap"));
  std::vector<int64_t> quota(static_cast<size_t>(ep_size + 1), 0);
  for (int64_t d = 0; d < ep_size; ++d) {
    const at::Tensor incoming = sent.select(1, d).contiguous();
    const int64_t total = incoming.sum().item<int64_t>();
    if (total <= cap) {
      quota[d] = incoming[rank].item<int64_t>();
      continue;
    }
    // Every rank sees the same counts, so under kFail every rank throws: no rank is left
    // waiting in the dispatch all-to-all.
    TORCH_CHECK(config_.receive_cap_policy != ReceiveCapPolicy::kFail, "MoELayer ",
                config_.layer_index, ": rank ", d, " would receive ", total,
                " rows in this forward, above MoEConfig.receive_cap_rows = ", cap,
                " (receive_cap_policy kFail; a drop policy keeps the step going)");
    quota[d] = split_receive_cap(incoming, cap)[rank].item<int64_t>();
  }
  const DropPolicy policy = config_.receive_cap_policy == ReceiveCapPolicy::kDropLatestPosition
                                ? DropPolicy::kByPosition
                                : DropPolicy::kByProbability;
  CapacityResult result =
      apply_group_capacity(destination, weights, at::tensor(quota, at::kLong), policy);
  result.num_dropped -= already_dropped;
  if (is_trace_recording() && result.num_dropped > 0) {
    // Interned per call: ids belong to one recording, and a recorder may restart.
    moescope_counter(moescope_intern("receive_cap.dropped_rows"),
                     static_cast<double>(result.num_dropped));
  }
  return result;
}

namespace {

// The expert weights' gradients, zero where backward left none (a rank that received no rows).
std::vector<at::Tensor> expert_gradients(const GroupedExperts& experts) {
  std::vector<at::Tensor> grads;
  for (at::Tensor weight : {experts->w_gate_up, experts->w_down}) {
    if (!weight.grad().defined()) weight.mutable_grad() = at::zeros_like(weight);
    grads.push_back(weight.grad());
  }
  return grads;
}

}  // namespace

void MoELayerImpl::sync_replica_gradients() {
  if (slots_.num_replicated_experts() == 0) return;
  reduce_over_replicas(expert_gradients(experts), /*first_replica_only=*/false);
}

at::Tensor MoELayerImpl::replica_gradient_partial_sums() {
  const int64_t width = experts->w_gate_up[0].numel() + experts->w_down[0].numel();
  if (slots_.num_replicated_experts() == 0) {
    return at::zeros({0, width}, experts->w_gate_up.options());
  }
  return replica_partial_sums(expert_gradients(experts), /*first_replica_only=*/false);
}

void MoELayerImpl::take_replica_gradient_sums(const at::Tensor& summed) {
  const int64_t width = experts->w_gate_up[0].numel() + experts->w_down[0].numel();
  TORCH_CHECK(summed.dim() == 2 && summed.size(0) == slots_.num_replicated_experts() &&
                  summed.size(1) == width,
              "MoELayer::take_replica_gradient_sums: layer ", config_.layer_index, " needs [",
              slots_.num_replicated_experts(), ", ", width, "] (replicated experts x elements of ",
              "one expert's w_gate_up and w_down), got ", summed.sizes());
  if (slots_.num_replicated_experts() == 0) return;
  write_replica_sums(expert_gradients(experts), summed);
}

void MoELayerImpl::check_placement_shape(const balancer::ExpertPlacement& placement,
                                         const char* what) const {
  TORCH_CHECK(placement.num_layers == 1 && placement.num_logical_experts == config_.num_experts &&
                  placement.num_physical_experts == num_expert_slots(config_) &&
                  placement.num_gpus == group_.size(),
              "MoELayer::", what, ": layer ", config_.layer_index, " needs a one-layer ",
              "placement of ", config_.num_experts, " experts in ", num_expert_slots(config_),
              " slots over ", group_.size(), " ranks, got ", placement.num_layers, " layers, ",
              placement.num_logical_experts, " experts, ", placement.num_physical_experts,
              " slots, ", placement.num_gpus, " GPUs");
}

void MoELayerImpl::restore_placement(const balancer::ExpertPlacement& placement) {
  check_placement_shape(placement, "restore_placement");
  slots_ = ExpertSlots(placement, 0, experts->w_gate_up.device());
}

PlacementChange MoELayerImpl::apply_placement(
    const balancer::ExpertPlacement& target,
    const std::vector<torch::optim::Optimizer*>& optimizers,
    const std::vector<at::Tensor>& extra_per_slot) {
  const auto start = std::chrono::steady_clock::now();
  check_placement_shape(target, "apply_placement");
  balancer::ExpertMigration migration;
  try {
    migration = balancer::plan_expert_migration(slots_.placement(), target);
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK(false, "MoELayer::apply_placement: ", error.what());
  }
  std::vector<at::Tensor> per_slot;
  for (const at::Tensor& weight : {experts->w_gate_up, experts->w_down}) {
    per_slot.push_back(weight);
    if (weight.grad().defined()) per_slot.push_back(weight.grad());
    for (const torch::optim::Optimizer* optimizer : optimizers) {
      for (const at::Tensor& state : optimizer_state_tensors(*optimizer, weight)) {
        if (state.dim() > 0) per_slot.push_back(state);  // Adam's step count is a scalar
      }
    }
  }
  for (const at::Tensor& tensor : extra_per_slot) {
    TORCH_CHECK(tensor.dim() > 0 && tensor.size(0) == num_local_experts(),
                "MoELayer::apply_placement: an extra per-slot tensor must be [",
                num_local_experts(), ", ...], got ", tensor.sizes());
    per_slot.push_back(tensor);
  }
  PlacementChange change;
  change.migration = migrate_slot_tensors(per_slot, slots_.placement(), migration, group_);
  change.moves = static_cast<int64_t>(migration.moves.size());
  slots_ = ExpertSlots(migration.placement, 0, experts->w_gate_up.device());
  change.placement = migration.placement;
  change.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return change;
}

}  // namespace moescope::runtime
