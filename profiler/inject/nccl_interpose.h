// NCCL interposition: the shim defines the public `ncclX` entry points, records each call
// (nccl_op_recorder.h) and forwards it with identical arguments to the real library's `pncclX`
// twin (NCCL >= 2.x exports both), found at first use wherever the process loaded NCCL
// (nccl_library.h): the shim never links NCCL, and a program without NCCL never reaches this
// code.
//
// Only works where the program links NCCL dynamically (PyTorch wheels load libnccl.so.2 from
// the nvidia-nccl wheel); a statically linked NCCL is invisible to LD_PRELOAD.
#pragma once

namespace moescope::inject {

// Both are weak: libmoescope_inject_no_nccl.so (moescope record --no-nccl) is the same shim
// without the interposer, so that no symbol of ours sits between the program and NCCL.
//
// Emits every op still waiting for its GPU completion (those not done get end = 0) and stops
// the completion poller. Called by gpu_capture_stop(); idempotent. The next recording (a new
// recorder generation, shim_session.h) starts the poller again at its first op and notes the
// NCCL version in its own trace.
__attribute__((weak)) void nccl_capture_shutdown();
// In a forked child: drop the parent's pending ops and poller without touching CUDA; a
// recording in the child starts its own poller.
__attribute__((weak)) void nccl_capture_after_fork_in_child();

}  // namespace moescope::inject
