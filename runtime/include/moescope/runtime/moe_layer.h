// moescope::runtime::MoELayer: a drop-in replacement for a dense FFN.
//
//   MoEConfig config;
//   config.hidden_size = 512; config.ffn_hidden_size = 1024; config.num_experts = 8;
//   MoELayer moe(config);                         // or MoELayer(config, ExpertParallelGroup{pg})
//   MoEOutput out = moe->forward(hidden);         // hidden [T, H] or [B, S, H]
//   loss = task_loss(out.output) + out.aux_loss;  // the balancing losses are the caller's to add
//
// forward() reads route -> dispatch -> compute -> combine:
//   route     Router: fp32 gate, scores, top-k (group limit, bias), losses
//   dispatch  capacity dropping, permute into expert order, all-to-all to the experts' ranks
//   compute   grouped SwiGLU over the local experts (+ shared experts on every token)
//   combine   all-to-all back, weighted un-permute into token order
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <utility>

#include "moescope/runtime/dispatch_buffer_pool.h"
#include "moescope/runtime/expert_parallel.h"
#include "moescope/runtime/expert_slots.h"
#include "moescope/runtime/grouped_experts.h"
#include "moescope/runtime/layer_cost_samples.h"
#include "moescope/runtime/moe_config.h"
#include "moescope/runtime/router.h"
#include "moescope/runtime/routing_replay.h"
#include "moescope/runtime/slot_migration.h"
#include "moescope/runtime/token_dispatcher.h"
#include "moescope/runtime/trace_statistics_queue.h"

namespace torch::optim {
class Optimizer;
}

namespace moescope::runtime {

/// What MoELayer::apply_placement() did on this rank.
struct PlacementChange {
  balancer::ExpertPlacement placement;  // the placement now in effect (one layer, GPUs = ranks)
  SlotMigrationResult migration;        // bytes and experts moved by this rank
  int64_t moves = 0;                    // cross-rank expert copies of the whole group
  double seconds = 0.0;                 // wall time of the migration on this rank
};

struct MoEOutput {
  at::Tensor output;              // same shape and dtype as the input
  at::Tensor aux_loss;            // 0-dim, input dtype: sum of the enabled balancing losses
  RouterLosses losses;            // each balancing loss on its own (undefined when disabled)
  at::Tensor tokens_per_expert;   // [E] int64 this rank's assignments per expert before drops
  int64_t num_dropped = 0;        // assignments the capacity limit dropped in this forward
  int64_t num_received_rows = 0;  // token copies this rank's experts computed (its load)
  int64_t num_dropped_by_receive_cap = 0;  // this rank's assignments the receive cap dropped
};

class MoELayerImpl : public torch::nn::Module {
 public:
  /// `group` spreads the experts over its ranks (every rank builds the layer with the same
  /// config, together: with redundant slots the replicas' weights are synchronised); the
  /// default is one process holding all experts.
  explicit MoELayerImpl(const MoEConfig& config, ExpertParallelGroup group = {});

  /// hidden [T, H] or [B, S, H], dtype of the expert weights. Every rank of the expert-parallel
  /// group must call forward together (T may differ between ranks, and may be 0).
  MoEOutput forward(const at::Tensor& hidden);

  /// The same layer computed by the loop-over-experts oracle (one process only): identical
  /// routing, capacity and shared experts; the routed experts run as a plain loop of autograd
  /// ops. The reference for tests and benchmarks.
  MoEOutput forward_loop_oracle(const at::Tensor& hidden);

  /// Aux-loss-free balancing: sums the tokens per expert routed since the last call over the
  /// group, applies bias += rate * sign(mean - load) and restarts the count. Call it on every
  /// rank together, e.g. after each optimizer step. Needs MoEConfig.enable_expert_bias.
  void update_expert_bias();
  /// update_expert_bias's two halves, for a caller that sums the load in an all-reduce of its
  /// own: the tokens per expert routed here since the last update, [E] int64 (a copy) ...
  at::Tensor expert_bias_partial_load() const;
  /// ... and the bias update from that load summed over the group ([E], any dtype holding
  /// whole numbers); restarts the count.
  void update_expert_bias_from(const at::Tensor& summed_load);

  /// Copies the experts of this rank's slots out of full-size expert weights, w_gate_up
  /// [E, H, 2F] and w_down [E, F, H] (loading a checkpoint made with another expert-parallel
  /// size or placement).
  void load_full_expert_weights(const at::Tensor& w_gate_up, const at::Tensor& w_down);

  /// Replicas of one expert must stay identical: sums each replicated expert's weight gradients
  /// over its replicas (one all-reduce of the replicated experts' gradients over the group) so
  /// every replica gets the gradient of the logical expert. Call on every rank after backward,
  /// before the optimizer step. Does nothing without replicated experts.
  void sync_replica_gradients();
  /// sync_replica_gradients' two halves, for a training loop that sums them in an all-reduce it
  /// makes anyway (moe_train packs them into its gradient all-reduce: no collective of their
  /// own). This rank's gradients of each replicated expert, summed over its local replicas:
  /// [R, P] in the expert weights' dtype, R = replicated experts, P = the elements of one
  /// expert's w_gate_up and w_down (an empty [0, P] tensor without replicas) ...
  at::Tensor replica_gradient_partial_sums();
  /// ... and `summed` (those [R, P] summed over the group) written into every local replica's
  /// gradient. Throws c10::Error when `summed` has another shape.
  void take_replica_gradient_sums(const at::Tensor& summed);

  /// Moves to a new placement between steps: `target` is a one-layer placement over the group's
  /// ranks with the layer's slot count (e.g. from plan_expert_placement_incremental). GPUs are
  /// renumbered to keep experts where they are (plan_expert_migration); then expert weights,
  /// their gradients (when defined) and their state in `optimizers` move over the group. The
  /// layer computes the same function afterwards. Every rank calls it together.
  /// `extra_per_slot` are more [S_local, ...] tensors moved with the experts: the optimizer
  /// state of an optimizer LibTorch does not own (Python's torch.optim, see moescope.runtime).
  PlacementChange apply_placement(const balancer::ExpertPlacement& target,
                                  const std::vector<torch::optim::Optimizer*>& optimizers = {},
                                  const std::vector<at::Tensor>& extra_per_slot = {});

  /// Takes `placement` (a one-layer placement over the group's ranks with the layer's slot
  /// count, e.g. expert_slots().placement() saved with a checkpoint) as the one this layer's
  /// slots hold now, without moving anything: for resuming from a checkpoint whose per-slot
  /// expert weights (and optimizer state) were saved under it. Throws c10::Error naming the
  /// mismatch.
  void restore_placement(const balancer::ExpertPlacement& placement);

  /// Sizes the dispatch buffer pool (MoEConfig.use_dispatch_buffer_pool) for the largest number
  /// of rows one rank is predicted to send or receive per forward; the rebalancer calls it with
  /// its forecast. No-op without a pool (or before the first forward creates it).
  void reserve_dispatch_buffers(double predicted_max_rank_rows);
  /// The pool's counters (nullptr without a pool or before the first expert-parallel forward).
  const DispatchBufferPool* dispatch_buffer_pool() const { return pool_.get(); }

  /// Where the logical experts live now.
  const ExpertSlots& expert_slots() const { return slots_; }

  /// Record (or replay) the experts chosen by each token; nullptr turns it off.
  void set_routing_replay(std::shared_ptr<RoutingReplay> replay) { replay_ = std::move(replay); }

  const MoEConfig& config() const { return config_; }
  const ExpertParallelGroup& group() const { return group_; }
  /// Physical expert slots on this rank (= local experts without redundant slots).
  int64_t num_local_experts() const { return num_expert_slots(config_) / group_.size(); }
  /// This rank's first slot; with the initial placement and no redundant slots, slot = expert.
  int64_t first_local_expert() const { return group_.rank() * num_local_experts(); }
  /// Tokens per logical expert routed by this rank in the last forward: [E] int64 (undefined
  /// before the first). What a load predictor observes (summed over the group).
  const at::Tensor& last_tokens_per_expert() const { return last_tokens_per_expert_; }

  /// This layer's statistics on their way to a recorded trace (written without a host sync, on
  /// a GPU usually during the next forward). drain() it before stopping an in-process recorder;
  /// destroying the layer drains it too.
  TraceStatisticsQueue& trace_statistics() { return trace_statistics_; }

  /// The costs this layer measured since the last call (CPU devices only; see
  /// layer_cost_samples.h), then starts over. The rebalancer takes them after every step.
  LayerCostSamples take_cost_samples() { return std::exchange(cost_samples_, {}); }

  Router router{nullptr};
  GroupedExperts experts{nullptr};         // this rank's expert slots [S_local, ...]
  GroupedExperts shared_experts{nullptr};  // one wide expert, or empty without shared experts
  at::Tensor accumulated_load;             // [E] int64 buffer: routed since the last bias update

 private:
  void check_input(const at::Tensor& hidden) const;
  /// Throws unless `placement` is one layer of this layer's experts, slots and ranks.
  void check_placement_shape(const balancer::ExpertPlacement& placement, const char* what) const;
  /// The slots' routing tensors on `device` (rebuilt after the module moved devices).
  const ExpertSlots& slots_on(const at::Device& device);
  /// For every replicated expert: each replica's rows of the per-slot tensors ([S_local, ...])
  /// become the sum over all its replicas (or, first_replica_only, the first replica's rows).
  /// One all-reduce for all of them.
  void reduce_over_replicas(const std::vector<at::Tensor>& per_slot, bool first_replica_only);
  /// reduce_over_replicas' local half: [R, sum of the tensors' elements per slot], this rank's
  /// rows added per replicated expert.
  at::Tensor replica_partial_sums(const std::vector<at::Tensor>& per_slot,
                                  bool first_replica_only) const;
  /// reduce_over_replicas' last half: the group's sums [R, ...] back into every local replica.
  void write_replica_sums(const std::vector<at::Tensor>& per_slot, const at::Tensor& summed) const;
  /// MoEConfig.receive_cap_rows: every rank learns how many rows each rank sends each rank (one
  /// all-reduce of [ep, ep] counts), splits each receiver's cap among its senders
  /// (split_receive_cap) and drops its own rows beyond its quotas. slot_indices/keep_mask/
  /// weights [T, K]. Returns the new keep mask and the assignments it dropped.
  CapacityResult apply_receive_cap(const at::Tensor& slot_indices, const at::Tensor& keep_mask,
                                   const at::Tensor& weights);
  /// The pool for rows of `like`'s dtype and device (created or recreated on first use).
  DispatchBufferPool* pool_for(const at::Tensor& like);
  RoutingResult route(const at::Tensor& tokens, int64_t sequence_length);
  at::Tensor add_shared_experts(const at::Tensor& routed_output, const at::Tensor& tokens,
                                bool use_oracle);

  MoEConfig config_;
  ExpertParallelGroup group_;
  std::shared_ptr<RoutingReplay> replay_;
  ExpertSlots slots_;
  at::Tensor last_tokens_per_expert_;
  std::unique_ptr<DispatchBufferPool> pool_;
  TraceStatisticsQueue trace_statistics_;
  LayerCostSamples cost_samples_;
};
TORCH_MODULE(MoELayer);

}  // namespace moescope::runtime
