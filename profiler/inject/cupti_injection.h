// Process-level control of the GPU capture (CUPTI + NCCL timing), called by the shim core.
//
// The shim core calls gpu_capture_start() after it started the recorder and gpu_capture_stop()
// before it stops it (normal exit, exit() from any thread, SIGINT/SIGTERM). In between:
//
//   MOESCOPE_CUPTI=auto (default): if CUDA_INJECTION64_PATH is set (moescope record points it at
//       the shim) CUPTI starts when the CUDA driver initializes and calls InitializeInjection,
//       so processes that never use CUDA (launchers, shells) pay nothing; otherwise it starts
//       now.
//   MOESCOPE_CUPTI=eager | lazy | off: force one behaviour.
//
// Without libcuda.so.1 nothing is enabled: the trace gets an instant "gpu capture off: no CUDA
// driver" in the "moescope" domain and gpu_capture_metadata_json() says so.
#pragma once

#include <string>

namespace moescope::inject {

// Optional, before the recording starts: decides what gpu_capture_start() will do (off, no CUDA
// driver, wait for cuInit, start now), so gpu_capture_metadata_json() can go into the trace's
// header. gpu_capture_start() decides by itself when this was not called.
void gpu_capture_prepare();
void gpu_capture_start();
// Idempotent: delivers CUPTI's last records, finalizes CUPTI and drains pending NCCL timings.
void gpu_capture_stop();
// The program's own CUPTI client (torch.profiler's Kineto, ...) subscribes or registers its
// activity callbacks: CUPTI 13.0 has one subscriber and one set of callbacks per process, so
// the capture yields (delivers what CUPTI holds for it, disables its kinds, unsubscribes) and
// notes it in the trace, naming `client`. NVTX and NCCL capture go on. Called by the
// interposed cuptiSubscribe / cuptiActivityRegisterCallbacks (cupti_client_interpose.cpp).
void gpu_capture_yield(const std::string& client);
// The function `name` of the libcupti the capture loaded (nullptr before it loaded one).
void* gpu_capture_real_cupti_function(const char* name);
// In a forked child: forget the parent's CUPTI session (the child records no CUDA activity).
void gpu_capture_after_fork_in_child();
// A JSON object for the trace metadata: {"cupti":"<state>","cupti_detail":"<why>"}, e.g.
// {"cupti":"no CUDA driver","cupti_detail":"libcuda.so.1 not found"}.
std::string gpu_capture_metadata_json();
// What the capture is doing now: "off", "no CUDA driver", "waiting for cuInit", "on", "failed".
std::string gpu_capture_state();
// Tests only (one process plays many): forget that the driver called InitializeInjection, as in
// a fresh process. After a real cuInit, a new recording starts CUPTI at once instead of waiting
// for a cuInit that never comes again.
void gpu_capture_forget_cuda_init_for_tests();

}  // namespace moescope::inject

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names the shim. Returns 1.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void);
