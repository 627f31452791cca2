// The interposed `ncclX` entry points. Each one: resolve the real function (once), record what
// the call means, forward with the same arguments, return the real result unchanged.
#include "nccl_interpose.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "moescope/recorder.h"
#include "nccl_abi.h"
#include "nccl_library.h"
#include "nccl_op_recorder.h"

namespace moescope::inject {

// The recording now on (shim_session.h). Weak: the GPU half also links into tests without the
// shim core, where one recording per process is assumed.
__attribute__((weak)) uint64_t recording_generation();

namespace {

using nccl::CommHandle;
using nccl::Config;
using nccl::DataType;
using nccl::RedOp;
using nccl::Result;
using nccl::Stream;
using nccl::UniqueId;

// The real entry point `name` ("AllReduce") of the NCCL the process loaded, wherever it sits
// (nccl_library.h). Cached in `slot` once found; a miss is looked up again at the next call
// (NCCL may be loaded later).
template <typename Function>
Function real_function(std::atomic<void*>& slot, const char* name) {
  void* function = slot.load(std::memory_order_acquire);
  if (function) return reinterpret_cast<Function>(function);
  function = find_real_nccl_function(name);
  if (!function) return nullptr;
  slot.store(function, std::memory_order_release);
  return reinterpret_cast<Function>(function);
}

class RealCommQueries final : public NcclCommQueries {
 public:
  bool user_rank(CommHandle comm, int* rank) override {
    using Fn = Result (*)(CommHandle, int*);
    auto fn = real_function<Fn>(user_rank_, "CommUserRank");
    return fn && fn(comm, rank) == nccl::kSuccess;
  }
  bool count(CommHandle comm, int* num_ranks) override {
    using Fn = Result (*)(CommHandle, int*);
    auto fn = real_function<Fn>(count_, "CommCount");
    return fn && fn(comm, num_ranks) == nccl::kSuccess;
  }
  bool cuda_device(CommHandle comm, int* device) override {
    using Fn = Result (*)(CommHandle, int*);
    auto fn = real_function<Fn>(cuda_device_, "CommCuDevice");
    return fn && fn(comm, device) == nccl::kSuccess;
  }

 private:
  std::atomic<void*> user_rank_{nullptr};
  std::atomic<void*> count_{nullptr};
  std::atomic<void*> cuda_device_{nullptr};
};

// Everything the interposer needs, created at the first NCCL call and never destroyed (NCCL
// calls may come from static destructors).
struct NcclCapture {
  CudaRuntimeEvents events;
  RealCommQueries queries;
  NcclCompletionTracker tracker{events, [] { return moescope_now_ns(); },
                                [](const NcclOpRecord& op) { moescope_comm_op(&op.info); }};
  NcclOpRecorder recorder{queries, tracker, [] { return moescope_now_ns(); },
                          [](const moescope_comm_op_info& info) { moescope_comm_op(&info); }};
  // MOESCOPE_NCCL=0 (shim option): forward only, record nothing.
  bool enabled = [] {
    const char* value = std::getenv("MOESCOPE_NCCL");
    return !(value && value[0] == '0');
  }();
  NcclPollerGate poller_gate{tracker};
  // The recording whose trace got the "NCCL <version> interposed" note (0: none).
  std::atomic<uint64_t> version_noted_for{0};
};

std::atomic<NcclCapture*> g_capture{nullptr};

NcclCapture& capture() {
  static NcclCapture* instance = [] {
    auto* created = new NcclCapture();
    // The poller thread does not survive fork(): the child must never join or poll it.
    pthread_atfork(nullptr, nullptr, [] { nccl_capture_after_fork_in_child(); });
    g_capture.store(created, std::memory_order_release);
    return created;
  }();
  return *instance;
}

// Changes whenever a recording starts: through the shim's session, in a forked child, or by
// the program's own moescope_recorder_stop()/moescope_recorder_start().
uint64_t current_recording() {
  return recording_generation ? recording_generation() : 1;
}

// Notes the real NCCL version once per recording, so each trace says what it interposed.
void note_version(NcclCapture& state, uint64_t recording) {
  if (state.version_noted_for.load(std::memory_order_relaxed) == recording) return;
  if (state.version_noted_for.exchange(recording) == recording) return;
  static std::atomic<void*> slot{nullptr};
  auto get_version = real_function<Result (*)(int*)>(slot, "GetVersion");
  int version = 0;
  if (!get_version || get_version(&version) != nccl::kSuccess) return;
  NcclLibrary library = found_nccl_library();
  std::string text = "NCCL " + std::to_string(version) + " interposed: " + library.path +
                     (library.global_scope ? " (global scope)" : " (local scope)");
  moescope_instant(moescope_intern("moescope"), moescope_intern(text.c_str()));
}

void note_version() {
  if (moescope_recording) note_version(capture(), current_recording());
}

// At exit the poller must stop, and its CUDA event queries end, before the CUDA runtime tears
// itself down. Registered at the first recorded op, when CUDA is up (cudart registered its own
// teardown earlier), so it runs before cudart's; also when CUPTI is off or refused, whose own
// exit handler (cupti_injection.cpp) would otherwise be the only one to stop the poller in time.
void register_exit_shutdown_once() {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit([] { nccl_capture_shutdown(); }); });
}

// Records one op around the forwarded call.
template <typename Forward>
Result record_op(const NcclOpCall& call, Forward forward) {
  if (!moescope_recording) return forward();
  NcclCapture& state = capture();
  if (!state.enabled) return forward();
  uint64_t recording = current_recording();
  note_version(state, recording);
  NcclOpRecorder::Ticket ticket = state.recorder.op_begin(call);
  Result result = forward();
  state.recorder.op_end(ticket, result);
  state.poller_gate.op_issued(recording);
  register_exit_shutdown_once();
  return result;
}

// Only reachable when the program found our `ncclX` with no NCCL loaded at all (a probe with
// dlsym(RTLD_DEFAULT, ...)); without the shim it would have found nothing. ncclSystemError is
// the closest answer NCCL has; `moescope record --no-nccl` keeps our symbols out of the way.
Result missing(const char* function) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "moescope: %s called but no NCCL library is loaded in this process: returning "
                 "ncclSystemError (record with --no-nccl to leave NCCL calls alone)\n",
                 function);
  }
  return nccl::kSystemError;
}

}  // namespace

void nccl_capture_shutdown() {
  NcclCapture* state = g_capture.load(std::memory_order_acquire);
  if (!state) return;  // NCCL was never called
  state->poller_gate.shut_down(current_recording());
}

void nccl_capture_after_fork_in_child() {
  NcclCapture* state = g_capture.load(std::memory_order_acquire);
  if (!state) return;
  state->tracker.abandon_after_fork();
  state->poller_gate.after_fork_in_child();
}

}  // namespace moescope::inject

// ---- the interposed NCCL API (same signatures as nccl.h 2.28) ----------------------------------

using moescope::inject::capture;
using moescope::inject::NcclOpCall;
using moescope::inject::NcclOpRecorder;
using moescope::inject::real_function;
using moescope::inject::record_op;
namespace nccl = moescope::inject::nccl;

#define MOESCOPE_INTERPOSE extern "C" __attribute__((visibility("default")))

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
  using Fn = nccl::Result (*)(nccl::CommHandle*, int, nccl::UniqueId, int);
  auto real = real_function<Fn>(slot, "CommInitRank");
  if (!real) return moescope::inject::missing("ncclCommInitRank");
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comm, nranks, comm_id, rank);
  if ((result == nccl::kSuccess || result == nccl::kInProgress) && comm && *comm) {
    capture().recorder.comm_created(*comm, NcclOpRecorder::comm_id_of(comm_id), rank, nranks,
                                    "ncclCommInitRank", begin);
  }
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommInitRankConfig(nccl::CommHandle* comm, int nranks,
                                                       nccl::UniqueId comm_id, int rank,
                                                       nccl::Config* config) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(nccl::CommHandle*, int, nccl::UniqueId, int, nccl::Config*);
  auto real = real_function<Fn>(slot, "CommInitRankConfig");
  if (!real) return moescope::inject::missing("ncclCommInitRankConfig");
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comm, nranks, comm_id, rank, config);
  if ((result == nccl::kSuccess || result == nccl::kInProgress) && comm && *comm) {
    capture().recorder.comm_created(*comm, NcclOpRecorder::comm_id_of(comm_id), rank, nranks,
                                    "ncclCommInitRankConfig", begin);
  }
  return result;
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
  if ((result == nccl::kSuccess || result == nccl::kInProgress) && comm && *comm && comm_ids &&
      num_ids > 0) {
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
  if ((result == nccl::kSuccess || result == nccl::kInProgress) && new_comm && *new_comm &&
      color != nccl::kSplitNoColor) {
    capture().recorder.comm_created(*new_comm, split_id, -1, -1, "ncclCommSplit", begin);
  }
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommDestroy(nccl::CommHandle comm) {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)(nccl::CommHandle)>(slot, "CommDestroy");
  if (!real) return moescope::inject::missing("ncclCommDestroy");
  uint64_t begin = moescope_now_ns();
  nccl::Result result = real(comm);
  capture().recorder.comm_destroyed(comm, "ncclCommDestroy", begin);
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclCommAbort(nccl::CommHandle comm) {
  static std::atomic<void*> slot{nullptr};
  auto real = real_function<nccl::Result (*)(nccl::CommHandle)>(slot, "CommAbort");
  if (!real) return moescope::inject::missing("ncclCommAbort");
  uint64_t begin = moescope_now_ns();
  // Before the call: the communicator's pending ops must not have their events queried while
  // NCCL tears its streams down.
  capture().recorder.comm_aborting(comm);
  nccl::Result result = real(comm);
  capture().recorder.comm_destroyed(comm, "ncclCommAbort", begin);
  return result;
}

MOESCOPE_INTERPOSE nccl::Result ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              nccl::DataType datatype, nccl::RedOp op,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, nccl::RedOp,
                              nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "AllReduce");
  if (!real) return moescope::inject::missing("ncclAllReduce");
  NcclOpCall call{MOESCOPE_COMM_ALL_REDUCE, "ncclAllReduce", count, datatype, -1, -1, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclAllGather(const void* sendbuff, void* recvbuff,
                                              size_t sendcount, nccl::DataType datatype,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn =
      nccl::Result (*)(const void*, void*, size_t, nccl::DataType, nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "AllGather");
  if (!real) return moescope::inject::missing("ncclAllGather");
  NcclOpCall call{
      MOESCOPE_COMM_ALL_GATHER, "ncclAllGather", sendcount, datatype, -1, -1, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, sendcount, datatype, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                  size_t recvcount, nccl::DataType datatype,
                                                  nccl::RedOp op, nccl::CommHandle comm,
                                                  nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, nccl::RedOp,
                              nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "ReduceScatter");
  if (!real) return moescope::inject::missing("ncclReduceScatter");
  NcclOpCall call{
      MOESCOPE_COMM_REDUCE_SCATTER, "ncclReduceScatter", recvcount, datatype, -1, -1, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              nccl::DataType datatype, int root,
                                              nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, int, nccl::CommHandle,
                              nccl::Stream);
  auto real = real_function<Fn>(slot, "Broadcast");
  if (!real) return moescope::inject::missing("ncclBroadcast");
  NcclOpCall call{
      MOESCOPE_COMM_BROADCAST, "ncclBroadcast", count, datatype, -1, root, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclBcast(void* buff, size_t count, nccl::DataType datatype,
                                          int root, nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(void*, size_t, nccl::DataType, int, nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "Bcast");
  if (!real) return moescope::inject::missing("ncclBcast");
  NcclOpCall call{MOESCOPE_COMM_BROADCAST, "ncclBcast", count, datatype, -1, root, comm, stream};
  return record_op(call, [&] { return real(buff, count, datatype, root, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                           nccl::DataType datatype, nccl::RedOp op, int root,
                                           nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, nccl::RedOp, int,
                              nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "Reduce");
  if (!real) return moescope::inject::missing("ncclReduce");
  NcclOpCall call{MOESCOPE_COMM_REDUCE, "ncclReduce", count, datatype, -1, root, comm, stream};
  return record_op(
      call, [&] { return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                             nccl::DataType datatype, nccl::CommHandle comm,
                                             nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn =
      nccl::Result (*)(const void*, void*, size_t, nccl::DataType, nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "AlltoAll");
  if (!real) return moescope::inject::missing("ncclAlltoAll");
  NcclOpCall call{MOESCOPE_COMM_ALL_TO_ALL, "ncclAlltoAll", count, datatype, -1, -1, comm, stream};
  return record_op(call, [&] { return real(sendbuff, recvbuff, count, datatype, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                           nccl::DataType datatype, int root, nccl::CommHandle comm,
                                           nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, int, nccl::CommHandle,
                              nccl::Stream);
  auto real = real_function<Fn>(slot, "Gather");
  if (!real) return moescope::inject::missing("ncclGather");
  NcclOpCall call{MOESCOPE_COMM_GATHER, "ncclGather", count, datatype, -1, root, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                            nccl::DataType datatype, int root,
                                            nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(const void*, void*, size_t, nccl::DataType, int, nccl::CommHandle,
                              nccl::Stream);
  auto real = real_function<Fn>(slot, "Scatter");
  if (!real) return moescope::inject::missing("ncclScatter");
  NcclOpCall call{MOESCOPE_COMM_SCATTER, "ncclScatter", count, datatype, -1, root, comm, stream};
  return record_op(call,
                   [&] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclSend(const void* sendbuff, size_t count,
                                         nccl::DataType datatype, int peer, nccl::CommHandle comm,
                                         nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn =
      nccl::Result (*)(const void*, size_t, nccl::DataType, int, nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "Send");
  if (!real) return moescope::inject::missing("ncclSend");
  NcclOpCall call{MOESCOPE_COMM_SEND, "ncclSend", count, datatype, peer, -1, comm, stream};
  return record_op(call, [&] { return real(sendbuff, count, datatype, peer, comm, stream); });
}

MOESCOPE_INTERPOSE nccl::Result ncclRecv(void* recvbuff, size_t count, nccl::DataType datatype,
                                         int peer, nccl::CommHandle comm, nccl::Stream stream) {
  static std::atomic<void*> slot{nullptr};
  using Fn = nccl::Result (*)(void*, size_t, nccl::DataType, int, nccl::CommHandle, nccl::Stream);
  auto real = real_function<Fn>(slot, "Recv");
  if (!real) return moescope::inject::missing("ncclRecv");
  NcclOpCall call{MOESCOPE_COMM_RECV, "ncclRecv", count, datatype, peer, -1, comm, stream};
  return record_op(call, [&] { return real(recvbuff, count, datatype, peer, comm, stream); });
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
  if ((result == nccl::kSuccess || result == nccl::kInProgress) && new_comm && *new_comm) {
    recorder.comm_created(*new_comm, shrink_id, -1, -1, "ncclCommShrink", begin);
  }
  return result;
}
