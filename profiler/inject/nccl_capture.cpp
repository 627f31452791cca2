// The NCCL interposer's capture state and the steps its entry points share (nccl_capture.h).
#include "nccl_capture.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "nccl_interpose.h"

namespace moescope::inject {

// The recording now on (shim_session.h). Weak: the GPU half also links into tests without the
// shim core, where one recording per process is assumed.
__attribute__((weak)) uint64_t recording_generation();

namespace {

std::atomic<NcclCapture*> g_capture{nullptr};

}  // namespace

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

uint64_t current_recording() {
  return recording_generation ? recording_generation() : 1;
}

void note_version(NcclCapture& state, uint64_t recording) {
  if (state.version_noted_for.load(std::memory_order_relaxed) == recording) return;
  if (state.version_noted_for.exchange(recording) == recording) return;
  static std::atomic<void*> slot{nullptr};
  auto get_version = real_function<nccl::Result (*)(int*)>(slot, "GetVersion");
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

// Only reachable when the program found our `ncclX` with no NCCL loaded at all (a probe with
// dlsym(RTLD_DEFAULT, ...)); without the shim it would have found nothing. ncclSystemError is
// the closest answer NCCL has; `moescope record --no-nccl` keeps our symbols out of the way.
nccl::Result missing(const char* function) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "moescope: %s called but no NCCL library is loaded in this process: returning "
                 "ncclSystemError (record with --no-nccl to leave NCCL calls alone)\n",
                 function);
  }
  return nccl::kSystemError;
}

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
