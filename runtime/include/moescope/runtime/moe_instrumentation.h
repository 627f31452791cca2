// What the MoE runtime tells the outside world: NVTX ranges in a "moescope" domain (seen by
// Nsight Systems and by moescope's own NVTX injection) and events through the recorder's C API
// (moescope/recorder.h). Both are no-ops unless a tool or recorder listens. The per-layer
// statistics of a trace travel through trace_statistics_queue.h, without a host sync.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace moescope::runtime {

/// The phases of one MoE layer forward, in order.
enum class MoEPhase {
  kLayer,             // the whole forward
  kRoute,             // gate, scores, top-k, losses
  kPermute,           // capacity + gather into expert order
  kDispatchAllToAll,  // counts exchange + rows to the experts' ranks
  kExperts,           // grouped SwiGLU of the local experts
  kSharedExperts,     // the shared experts
  kCombineAllToAll,   // rows back to their home ranks
  kUnpermute,         // weighted scatter back into tokens
};
inline constexpr int kNumMoEPhases = 8;

const char* phase_name(MoEPhase phase);

/// True while a moescope recorder writes a trace in this process.
bool is_trace_recording();

/// A recorder span for the lifetime of the object while a recorder is active, an NVTX range in
/// the "moescope" domain otherwise (never both: moescope's NVTX injection would record it twice).
class PhaseRange {
 public:
  explicit PhaseRange(MoEPhase phase);
  ~PhaseRange();
  PhaseRange(const PhaseRange&) = delete;
  PhaseRange& operator=(const PhaseRange&) = delete;

 private:
  enum class Open { kNvtxRange, kRecorderSpan };
  Open open_ = Open::kNvtxRange;
};

/// Marks the start of a training step: records moescope_step(step) and makes `step` the step
/// that later per-layer events carry. Call it once per step on every rank.
void set_training_step(int64_t step);
int64_t current_training_step();

/// Times one all-to-all and reports it with its per-destination byte split when finish() runs.
class CommunicationRecord {
 public:
  /// split_rows [num_ranks] rows sent to each rank, row_bytes bytes per row, `like` gives the
  /// dtype and device.
  CommunicationRecord(const char* name, int rank, int num_ranks,
                      const std::vector<int64_t>& split_rows, int64_t row_bytes,
                      const at::Tensor& like);
  /// An all-reduce of `tensor` (bytes: its size), so that the trace holds the all-reduce's
  /// bandwidth (the step cost model fits the replicas' gradient sync from it).
  CommunicationRecord(const char* name, int rank, int num_ranks, const at::Tensor& tensor);
  void finish();

 private:
  bool active_ = false;
  const char* name_;
  int rank_, num_ranks_;
  std::vector<uint64_t> split_bytes_;
  uint32_t kind_ = 0;          // moescope_comm_kind (all-to-all unless the all-reduce constructor)
  uint64_t reduce_bytes_ = 0;  // all-reduce only
  uint64_t count_ = 0;
  uint32_t dtype_ = 0;
  int32_t device_ = -1;
  uint64_t start_ns_ = 0;
};

}  // namespace moescope::runtime
