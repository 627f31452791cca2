// Communication: all-to-all split matrices (rank x rank bytes) and achieved bandwidth per op.
// A rank's all-to-all row comes from its own ops' split sizes (bytes sent to each peer); ranks
// are ranks inside the communicator. Bandwidth of one op = bytes this rank sent / (end -
// start); ops without a completion time are left out of the bandwidth statistics. The report
// and the viewer's communication panel both read these matrices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moescope/analysis/step_detection.h"
#include "moescope/analysis/trace_model.h"

namespace moescope::analysis {

struct AllToAllMatrix {
  uint64_t comm_id = 0;
  int32_t num_ranks = 0;
  uint32_t num_ops = 0;  // all-to-all ops summed in
  // bytes[src * num_ranks + dst]: bytes rank src sent to rank dst.
  std::vector<uint64_t> bytes;
  // Per sending rank [num_ranks]: its ops, the bytes they sent and the time spent in those
  // with a completion time.
  std::vector<uint32_t> ops_by_rank;
  std::vector<uint64_t> sent_bytes;
  std::vector<double> busy_ns;
  uint64_t at(int32_t src, int32_t dst) const { return bytes[size_t(src) * num_ranks + dst]; }
  uint64_t max_bytes() const;
  // max over mean of the bytes each rank receives (1 = even).
  double receive_imbalance() const;
  // Achieved bandwidth of rank `src` (GB/s = bytes per ns), 0 without timed ops.
  double bandwidth_gbps(int32_t src) const {
    return busy_ns[size_t(src)] > 0 ? double(sent_bytes[size_t(src)]) / busy_ns[size_t(src)] : 0;
  }
};

struct CommOpStats {
  std::string name;
  uint32_t kind = 0;  // moescope_comm_kind
  uint32_t count = 0;
  uint64_t bytes = 0;
  double total_ms = 0;
  double mean_gbps = 0, min_gbps = 0, max_gbps = 0;  // per op (GB/s = 1e9 bytes/s)
};

struct CommAnalysis {
  std::vector<AllToAllMatrix> all_to_all;  // one per communicator with all-to-alls
  std::vector<CommOpStats> ops;            // by (name, kind), sorted by total time
};

// Over the ops that start inside the filter's steps (step_window of each process) on the
// filter's rank (every rank by default).
CommAnalysis analyze_communication(const TraceModel& model, const StepRankFilter& filter = {});

// Per collective kind and step, on a rank (the mean over the ranks that have the step): ops,
// bytes and time, by the rules above (an op belongs to the step it starts in; time only from
// ops with a completion time). `moescope diff` compares these series.
struct CommKindSteps {
  uint32_t kind = 0;                   // moescope_comm_kind
  std::vector<int64_t> steps;          // every step of the run (known_steps), ascending
  std::vector<double> ops, bytes, ms;  // [steps]
};
std::vector<CommKindSteps> communication_per_step(const TraceModel& model);

const char* comm_kind_name(uint32_t kind);

}  // namespace moescope::analysis
