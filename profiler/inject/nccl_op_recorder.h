// What the NCCL interposer records: communicators (init/split/destroy with rank, size, id) and
// ops (kind, count, bytes, dtype, peer/root, stream, group id, per-communicator sequence,
// enqueue time, GPU start/end through NcclCompletionTracker).
//
// Groups: ops between ncclGroupStart and the matching ncclGroupEnd share a group id and get their
// per-communicator sequence there (a simulated group, ncclGroupSimulateEnd, gets none); NCCL only
// launches them at the outermost ncclGroupEnd, so that is where their GPU timing events go
// (one start/end pair per stream used by the group). All-to-all issued the PyTorch way, as
// ncclSend/ncclRecv pairs inside one group, therefore shows up as send/recv records with their
// peers and one shared group id. Group state is per thread, like NCCL's.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "nccl_abi.h"
#include "nccl_completion_tracker.h"

namespace moescope::inject {

// Questions about a communicator, answered by the real NCCL (tests: a fake).
class NcclCommQueries {
 public:
  virtual ~NcclCommQueries() = default;
  virtual bool user_rank(nccl::CommHandle comm, int* rank) = 0;
  virtual bool count(nccl::CommHandle comm, int* num_ranks) = 0;
  virtual bool cuda_device(nccl::CommHandle comm, int* device) = 0;
};

// One interposed collective or point-to-point call.
struct NcclOpCall {
  uint32_t kind = 0;           // moescope_comm_kind
  const char* name = nullptr;  // "ncclAllReduce" (static string)
  uint64_t count = 0;          // the count argument
  int dtype = 0;
  int peer = -1;
  int root = -1;
  nccl::CommHandle comm = nullptr;
  nccl::Stream stream = nullptr;
};

class NcclOpRecorder {
 public:
  using Clock = std::function<uint64_t()>;
  using Emit = std::function<void(const moescope_comm_op_info&)>;

  // `emit` receives communicator events directly; ops go through `tracker` (whose own emit
  // function writes them). `clock` gives host nanoseconds (moescope_now_ns).
  NcclOpRecorder(NcclCommQueries& queries, NcclCompletionTracker& tracker, Clock clock, Emit emit);

  // ---- communicators ----
  void comm_created(nccl::CommHandle comm, uint64_t comm_id, int rank, int num_ranks,
                    const char* call_name, uint64_t begin_ns);
  // After ncclCommDestroy / ncclCommAbort returned. For "ncclCommAbort", ops of the
  // communicator still pending are written as aborted (comm_aborting) if that was not done.
  void comm_destroyed(nccl::CommHandle comm, const char* call_name, uint64_t begin_ns);
  // Before the real ncclCommAbort: the communicator's pending ops are written at once with
  // end = 0 and a note, and their CUDA events are never queried (nccl_completion_tracker.h).
  void comm_aborting(nccl::CommHandle comm);
  // Comm id of a split child: equal on every rank that passes the same color, because NCCL
  // requires all ranks to split a communicator in the same order.
  uint64_t next_split_id(nccl::CommHandle parent, int color);
  // Comm id of a communicator shrunk from `parent` without `excluded`: equal on every rank
  // that stays (they shrink the parent in the same order with the same list).
  uint64_t next_shrink_id(nccl::CommHandle parent, const int* excluded, int excluded_count);
  static uint64_t comm_id_of(const nccl::UniqueId& id);

  // ---- groups (per thread) ----
  void group_start();
  // Before the real ncclGroupEnd: start events for the outermost group's streams.
  void group_end_before();
  // After it, with its result.
  void group_end_after(int result);
  // After the real ncclGroupSimulateEnd: the group ends like with ncclGroupEnd (depth and all),
  // but NCCL only estimated its ops and ran none, so they are dropped, not recorded (a note
  // counts them). Without this a simulated group would leave the depth at 1 and every later op
  // of the thread would wait in a group that never ends.
  void group_simulate_end_after(int result);
  uint64_t current_group_id() const;

  // ---- ops ----
  struct Ticket {
    NcclOpRecord record;
    const char* name = "nccl op";
    nccl::CommHandle comm = nullptr;
    int device = -1;
    nccl::Stream stream = nullptr;
    bool grouped = false;
    NcclCompletionTracker::Mark start;
  };
  // Before forwarding: fills everything known now and marks the start (outside groups).
  Ticket op_begin(const NcclOpCall& call);
  // After forwarding, with the real result.
  void op_end(Ticket& ticket, int result);

  // Bytes of an op (see docs/gpu-capture.md): per-peer bytes for all-to-all go to `splits`.
  static uint64_t op_bytes(uint32_t kind, uint64_t count, int dtype, int num_ranks,
                           std::vector<uint64_t>* splits);

 private:
  struct CommInfo {
    uint64_t comm_id = 0;
    int rank = -1;
    int num_ranks = -1;
    int device = -1;
    uint32_t next_sequence = 0;
    uint32_t splits = 0;
  };
  struct GroupedOp {
    NcclOpRecord record;
    int device;
    nccl::Stream stream;
    nccl::CommHandle comm;
  };
  struct StreamMarks {
    int device;
    nccl::Stream stream;
    NcclCompletionTracker::Mark start;
  };
  struct ThreadGroup {
    int depth = 0;
    uint64_t group_id = 0;
    std::vector<GroupedOp> ops;
    std::vector<StreamMarks> streams;
  };

  CommInfo& comm_info_locked(nccl::CommHandle comm);
  // A communicator's init or destroy: no peer, no root, from begin_ns to now.
  void emit_lifecycle(moescope_comm_op_info& info, moescope_comm_kind kind, const char* call_name,
                      uint64_t begin_ns);
  static ThreadGroup& thread_group();
  void note_failure(const char* call_name, int result);

  NcclCommQueries& queries_;
  NcclCompletionTracker& tracker_;
  Clock clock_;
  Emit emit_;
  std::mutex comms_mutex_;
  std::unordered_map<nccl::CommHandle, CommInfo> comms_;
};

}  // namespace moescope::inject
