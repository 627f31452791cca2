// What every interposed `ncclX` entry point (nccl_interpose.cpp) shares: the real function,
// found once; the capture state, made at the first NCCL call; recording an op around the
// forwarded call; the answer when no NCCL is loaded. Private to the interposer.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "moescope/recorder.h"
#include "moescope/trace/recording_environment.h"
#include "nccl_abi.h"
#include "nccl_completion_tracker.h"
#include "nccl_library.h"
#include "nccl_op_recorder.h"

namespace moescope::inject {

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
  bool user_rank(nccl::CommHandle comm, int* rank) override {
    using Fn = nccl::Result (*)(nccl::CommHandle, int*);
    auto fn = real_function<Fn>(user_rank_, "CommUserRank");
    return fn && fn(comm, rank) == nccl::kSuccess;
  }
  bool count(nccl::CommHandle comm, int* num_ranks) override {
    using Fn = nccl::Result (*)(nccl::CommHandle, int*);
    auto fn = real_function<Fn>(count_, "CommCount");
    return fn && fn(comm, num_ranks) == nccl::kSuccess;
  }
  bool cuda_device(nccl::CommHandle comm, int* device) override {
    using Fn = nccl::Result (*)(nccl::CommHandle, int*);
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
    const char* value = std::getenv(trace::environment::kNccl);
    return !(value && value[0] == '0');
  }();
  NcclPollerGate poller_gate{tracker};
  // The recording whose trace got the "NCCL <version> interposed" note (0: none).
  std::atomic<uint64_t> version_noted_for{0};
};

// The capture state, made at the first call and never destroyed.
NcclCapture& capture();

// Changes whenever a recording starts: through the shim's session, in a forked child, or by
// the program's own moescope_recorder_stop()/moescope_recorder_start().
uint64_t current_recording();

// Notes the real NCCL version once per recording, so each trace says what it interposed: in
// `recording` of `state`, or (no arguments) in the recording now on, if any.
void note_version(NcclCapture& state, uint64_t recording);
void note_version();

// Stops the completion poller at exit, before the CUDA runtime tears itself down (once).
void register_exit_shutdown_once();

// Records one op around the forwarded call.
template <typename Forward>
nccl::Result record_op(const NcclOpCall& call, Forward forward) {
  if (!moescope_recording) return forward();
  NcclCapture& state = capture();
  if (!state.enabled) return forward();
  uint64_t recording = current_recording();
  note_version(state, recording);
  NcclOpRecorder::Ticket ticket = state.recorder.op_begin(call);
  nccl::Result result = forward();
  state.recorder.op_end(ticket, result);
  state.poller_gate.op_issued(recording);
  register_exit_shutdown_once();
  return result;
}

// The answer of an entry point whose real function is not loaded (ncclSystemError, with one
// warning per process).
nccl::Result missing(const char* function);

// real_function by the name the interposer exports ("ncclAllReduce"), as missing() takes it.
template <typename Function>
Function real_entry_point(std::atomic<void*>& slot, const char* exported_name) {
  return real_function<Function>(slot, exported_name + std::strlen("nccl"));
}

// The whole body of an interposed op (ncclAllReduce, ncclSend, ...): the real function named by
// `call` (cached in `slot`, the entry point's own), `call` recorded around it, `args` forwarded
// unchanged. The real function's type is the entry point's, deduced from its arguments.
template <typename... Args>
nccl::Result forward_recorded_op(std::atomic<void*>& slot, const NcclOpCall& call, Args... args) {
  auto real = real_entry_point<nccl::Result (*)(Args...)>(slot, call.name);
  if (!real) return missing(call.name);
  return record_op(call, [&] { return real(args...); });
}

}  // namespace moescope::inject
