// The interposed `ncclX` entry points. Each one: resolve the real function (once), record what
// the call means, forward with the same arguments, return the real result unchanged.
#include "nccl_interpose.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

#include "moescope/recorder.h"
#include "nccl_abi.h"
#include "nccl_capture.h"

// ---- the interposed NCCL API (same signatures as nccl.h 2.28) ----------------------------------

using moescope::inject::capture;
using moescope::inject::forward_recorded_op;
using moescope::inject::NcclOpRecorder;
using moescope::inject::real_entry_point;
using moescope::inject::real_function;
namespace nccl = moescope::inject::nccl;

#define MOESCOPE_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace {

// Whether a call that creates a communicator made one in `*comm` (kInProgress: a non-blocking
// one, still initialising).
bool made_comm(nccl::Result result, const nccl::CommHandle* comm) {
  return (result == nccl::kSuccess || result == nccl::kInProgress) && comm && *comm;
}

// ncclCommInitRank and ncclCommInitRankConfig (`config...`: its config): the communicator made
// is recorded as rank `rank` of `nranks` in the clique that `comm_id` names.
template <typename... Config>
nccl::Result forward_comm_init_rank(std::atomic<void*>& slot, const char* name,
                                    nccl::CommHandle* comm, int nranks, nccl::UniqueId comm_id,
                                    int rank, Config... config) {
  using Fn = nccl::Result (*)(nccl::CommHandle*, int, nccl::UniqueId, int, Config...);
  auto real = real_entry_point<Fn>(slot, name);
  if (!real) return moescope::inject::missing(name);
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comm, nranks, comm_id, rank, config...);
  if (made_comm(result, comm)) {
    capture().recorder.comm_created(*comm, NcclOpRecorder::comm_id_of(comm_id), rank, nranks, name,
                                    begin);
  }
  return result;
}

// ncclCommDestroy and ncclCommAbort: the communicator is recorded as gone once the call
// returns. An abort first writes its pending ops as aborted: their events must not be queried
// while NCCL tears its streams down.
nccl::Result forward_comm_end(std::atomic<void*>& slot, const char* name, nccl::CommHandle comm,
                              bool abort) {
  auto real = real_entry_point<nccl::Result (*)(nccl::CommHandle)>(slot, name);
  if (!real) return moescope::inject::missing(name);
  uint64_t begin = moescope_now_ns();
  if (abort) capture().recorder.comm_aborting(comm);
  nccl::Result result = real(comm);
  capture().recorder.comm_destroyed(comm, name, begin);
  return result;
}

}  // namespace

MOESCOPE_INTERPOSE nccl::Result ncclGetVersion(int* version) {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)(int*)>(slot, "GetVersion");
  if (!real) return moescope::inject::missing("ncclGetVersion");
  moescope::inject::note_version();
  return real(version);
}

MOESCOPE_INTERPOSE nccl::Result ncclGetUniqueId(nccl::UniqueId* id) {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)(nccl::UniqueId*)>(slot, "GetUniqueId");
  if (!real) return moescope::inject::missing("ncclGetUniqueId");
  moescope::inject::note_version();
  return real(id);
}

MOESCOPE_INTERPOSE nccl::Result ncclCommInitRank(nccl::CommHandle* comm, int nranks,
                                                 nccl::UniqueId comm_id, int rank) {
  static std::atomic<void*> slot{nullptr};
  return forward_comm_init_rank(slot, "ncclCommInitRank", comm, nranks, comm_id, rank);
}

MOESCOPE_INTERPOSE nccl::Result ncclCommInitRankConfig(nccl::CommHandle* comm, int nranks,
                                                       nccl::UniqueId comm_id, int rank,
                                                       nccl::Config* config) {
  static std::atomic<void*> slot{nullptr};
  return forward_comm_init_rank(slot, "ncclCommInitRankConfig", comm, nranks, comm_id, rank,
                                config);
}

MOESCOPE_INTERPOSE nccl::Result ncclCommInitRankScalable(nccl::CommHandle* comm, int nranks,
                                                         int rank, int num_ids,
                                                         nccl::UniqueId* comm_ids,
                                                         nccl::Config* config) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(nccl::CommHandle*, int, int, int, nccl::UniqueId*, nccl::Config*);
  auto real = real_function<Fn>(slot, "CommInitRankScalable");
  if (!real) return moescope::inject::missing("ncclCommInitRankScalable");
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comm, nranks, rank, num_ids, comm_ids, config);
  if (made_comm(result, comm) && comm_ids && num_ids > 0) {
    capture().recorder.comm_created(*comm, NcclOpRecorder::comm_id_of(comm_ids[0]), rank, nranks,
                                    "ncclCommInitRankScalable", begin);
  }
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommInitAll(nccl::CommHandle* comms, int ndev,
                                                const int* devlist) {
  static std::atomic<void*> slot{nullptr};
  static std::atomic<uint64_t> clique{0};
  using Fn = nccl::Result (*)(nccl::CommHandle*, int, const int*);
  auto real = real_function<Fn>(slot, "CommInitAll");
  if (!real) return moescope::inject::missing("ncclCommInitAll");
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comms, ndev, devlist);
  if (result == nccl::kSuccess && comms) {
    // One process owns the whole clique: an id from the process and a counter is unique.
    nccl::UniqueId id{};
    uint64_t parts[2] = {static_cast<uint64_t>(getpid()), clique.fetch_add(1)};
    std::memcpy(id.internal, parts, sizeof(parts));
    for (int i = 0; i < ndev; ++i) {
      if (comms[i]) {
        capture().recorder.comm_created(comms[i], NcclOpRecorder::comm_id_of(id), i, ndev,
                                        "ncclCommInitAll", begin);
      }
    }
  }
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommSplit(nccl::CommHandle comm, int color, int key,
                                              nccl::CommHandle* new_comm, nccl::Config* config) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(nccl::CommHandle, int, int, nccl::CommHandle*, nccl::Config*);
  auto real = real_function<Fn>(slot, "CommSplit");
  if (!real) return moescope::inject::missing("ncclCommSplit");
  uint64_t begin = moescope_now_ns();
  uint64_t split_id = capture().recorder.next_split_id(comm, color);
  nccl::Result result = real(comm, color, key, new_comm, config);
  if (made_comm(result, new_comm) && color != nccl::kSplitNoColor) {
    capture().recorder.comm_created(*new_comm, split_id, -1, -1, "ncclCommSplit", begin);
  }
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommDestroy(nccl::CommHandle comm) {
  static std::atomic<void*> slot{nullptr};
  return forward_comm_end(slot, "ncclCommDestroy", comm, /*abort=*/false);
}

MOESCOPE_INTERPOSE nccl::Result ncclCommAbort(nccl::CommHandle comm) {
  static std::atomic<void*> slot{nullptr};
  return forward_comm_end(slot, "ncclCommAbort", comm, /*abort=*/true);
}

MOESCOPE_INTERPOSE nccl::Result ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              nccl::DataType datatype, nccl::RedOp op,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", count, datatype, -1, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, op, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclAllGather(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, nccl::DataType datatype,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", sendcount, datatype, -1, -1, comm, stream},
      sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, nccl::DataType datatype,
                                                  nccl::RedOp op, nccl::CommHandle comm,
                                                  nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(slot,
                             {MOESCOPE_COMM_REDUCE_SCATTER, "ncclReduceScatter", recvcount,
                              datatype, -1, -1, comm, stream},
                             sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              nccl::DataType datatype, int root,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_BROADCAST, "ncclBroadcast", count, datatype, -1, root, comm, stream},
      sendbuff, recvbuff, count, datatype, root, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclBcast(void* buff, size_t count, nccl::DataType datatype,
                                          int root, nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_BROADCAST, "ncclBcast", count, datatype, -1, root, comm, stream}, buff,
      count, datatype, root, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                           nccl::DataType datatype, nccl::RedOp op, int root,
                                           nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_REDUCE, "ncclReduce", count, datatype, -1, root, comm, stream}, sendbuff,
      recvbuff, count, datatype, op, root, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                             nccl::DataType datatype, nccl::CommHandle comm,
                                             nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_ALL_TO_ALL, "ncclAlltoAll", count, datatype, -1, -1, comm, stream},
      sendbuff, recvbuff, count, datatype, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                           nccl::DataType datatype, int root, nccl::CommHandle comm,
                                           nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_GATHER, "ncclGather", count, datatype, -1, root, comm, stream}, sendbuff,
      recvbuff, count, datatype, root, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                            nccl::DataType datatype, int root,
                                            nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_SCATTER, "ncclScatter", count, datatype, -1, root, comm, stream},
      sendbuff, recvbuff, count, datatype, root, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclSend(const void* sendbuff, size_t count,
                                         nccl::DataType datatype, int peer, nccl::CommHandle comm,
                                         nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_SEND, "ncclSend", count, datatype, peer, -1, comm, stream}, sendbuff,
      count, datatype, peer, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclRecv(void* recvbuff, size_t count, nccl::DataType datatype,
                                         int peer, nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  return forward_recorded_op(
      slot, {MOESCOPE_COMM_RECV, "ncclRecv", count, datatype, peer, -1, comm, stream}, recvbuff,
      count, datatype, peer, comm, stream);
}

MOESCOPE_INTERPOSE nccl::Result ncclGroupStart() {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)()>(slot, "GroupStart");
  if (!real) return moescope::inject::missing("ncclGroupStart");
  nccl::Result result = real();
  if (result == nccl::kSuccess) capture().recorder.group_start();
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclGroupEnd() {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)()>(slot, "GroupEnd");
  if (!real) return moescope::inject::missing("ncclGroupEnd");
  NcclOpRecorder& recorder = capture().recorder;
  recorder.group_end_before();
  nccl::Result result = real();
  recorder.group_end_after(result);
  return result;
}

// Ends a group like ncclGroupEnd, but NCCL only estimates its ops (torch asks it for collective
// time estimates): the group depth must come back down, and the ops are not recorded.
MOESCOPE_INTERPOSE nccl::Result ncclGroupSimulateEnd(nccl::SimInfo* sim_info) {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)(nccl::SimInfo*)>(slot, "GroupSimulateEnd");
  if (!real) return moescope::inject::missing("ncclGroupSimulateEnd");
  nccl::Result result = real(sim_info);
  capture().recorder.group_simulate_end_after(result);
  return result;
}

// A new communicator from a parent without some ranks: recorded like a split child (the
// ranks that stay get the same id); with NCCL_SHRINK_ABORT the parent's pending ops are
// written as aborted first, as for ncclCommAbort.
MOESCOPE_INTERPOSE nccl::Result ncclCommShrink(nccl::CommHandle comm, int* exclude_ranks,
                                               int exclude_count, nccl::CommHandle* new_comm,
                                               nccl::Config* config, int shrink_flags) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(nccl::CommHandle, int*, int, nccl::CommHandle*, nccl::Config*, int);
  auto real = real_function<Fn>(slot, "CommShrink");
  if (!real) return moescope::inject::missing("ncclCommShrink");
  uint64_t begin = moescope_now_ns();
  NcclOpRecorder& recorder = capture().recorder;
  uint64_t shrink_id = recorder.next_shrink_id(comm, exclude_ranks, exclude_count);
  if (shrink_flags & nccl::kShrinkAbort) recorder.comm_aborting(comm);
  nccl::Result result = real(comm, exclude_ranks, exclude_count, new_comm, config, shrink_flags);
  if (made_comm(result, new_comm)) {
    recorder.comm_created(*new_comm, shrink_id, -1, -1, "ncclCommShrink", begin);
  }
  return result;
}
