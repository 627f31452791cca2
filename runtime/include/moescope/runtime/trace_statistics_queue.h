// The per-layer statistics of a recorded trace on their way from the device to the trace.
//
//   forward (step s)  pack_layer_statistics: one [3E + 5] fp64 tensor on the device (no sync)
//                     HostCopyInFlight: non-blocking copy into pinned memory + an event
//   later forward     poll(): every copy whose event has completed is written to the trace,
//                     tagged with step s (the step its values belong to), in queue order
//   destruction       drain(): waits for what is left and writes it
//
// So recording makes the host wait for nothing. On a GPU a layer's statistics usually reach the
// trace during the next forward of the layer, one step late; on a CPU the copy is a snapshot and
// they are written during the forward itself. Values the runtime already holds on the host (the
// rows each local expert received, the dropped count) travel as they are.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "moescope/runtime/host_transfers.h"
#include "moescope/runtime/layer_statistics.h"

namespace moescope::runtime {

/// Everything recorded per layer and step.
struct LayerStepReport {
  int64_t layer = 0;
  int64_t rank = 0;
  LayerStatisticsInputs statistics;  // device tensors: this rank's counts, scores, losses, ...
  std::vector<int64_t> received_tokens_per_expert;  // [E_local] rows each local expert computed
  int64_t num_dropped = 0;                          // assignments dropped (capacity, receive cap)
  bool global_scope = false;  // the local counts are also global (one process)
};

class TraceStatisticsQueue {
 public:
  TraceStatisticsQueue() = default;
  /// Drains (a blocking wait for copies still in flight, if any).
  ~TraceStatisticsQueue();
  TraceStatisticsQueue(const TraceStatisticsQueue&) = delete;
  TraceStatisticsQueue& operator=(const TraceStatisticsQueue&) = delete;

  /// While a recorder is active, queues the statistics of one layer forward for the trace, tagged
  /// with current_training_step(). Then (recording or not) writes what has landed.
  void record_layer_step(const LayerStepReport& report);
  /// While a recorder is active, queues the expert bias [E] (e.g. after an aux-loss-free update).
  void record_expert_bias(int64_t layer, int64_t rank, const at::Tensor& expert_bias);

  /// Writes, in queue order, the statistics whose copies have landed; never waits. Statistics
  /// that land while no recorder is active are dropped.
  void poll();
  /// Waits for every copy in flight and writes them all: before stopping a recorder in-process
  /// (a recorder stopped earlier loses what was still in flight).
  void drain();
  /// Statistics queued and not yet written.
  size_t num_pending() const { return pending_.size(); }

  /// Tests: the arithmetic of pack_layer_statistics (default: default_statistics_arithmetic of
  /// the tensors' device).
  void set_arithmetic(std::optional<StatisticsArithmetic> arithmetic) { arithmetic_ = arithmetic; }
  /// Tests on a CPU: a copy queued in step s counts as landed only from step s + `steps` on (see
  /// set_training_step), as a GPU copy still in flight would (default 0: at once).
  void set_simulated_copy_latency(int64_t steps) { simulated_latency_steps_ = steps; }

 private:
  struct Pending {
    enum class Kind { kLayerStep, kExpertBias } kind;
    int64_t step = 0, layer = 0, rank = 0;
    int64_t num_experts = 0;
    HostCopyInFlight copy;  // the packed statistics, or the [E] bias
    // kLayerStep only: what the runtime had on the host already.
    std::vector<int64_t> received_tokens_per_expert;
    int64_t num_dropped = 0;
    bool has_tokens = false, global_scope = false;
  };
  bool has_landed(const Pending& pending) const;
  void write(const Pending& pending) const;
  /// True (and a warning, once per process) when `on_device`'s stream is capturing a CUDA graph:
  /// the statistics of that step are not recorded.
  static bool skipped_for_graph_capture(const at::Tensor& on_device);

  std::deque<Pending> pending_;
  int64_t simulated_latency_steps_ = 0;
  std::optional<StatisticsArithmetic> arithmetic_;
};

}  // namespace moescope::runtime
