// The C entry points (moescope/torch_capture/torch_capture.h). No torch headers here: which
// captures run, the recorder check and how the shim treats NCCL.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "capture_parts.h"
#include "moescope/torch_capture/torch_capture.h"
#include "recorder_binding.h"

namespace moescope::torch_capture {

const char* missing_recorder_reason() {
  const bool present = &moescope_recording && moescope_intern && moescope_intern_n &&
                       moescope_now_ns && moescope_span_complete && moescope_instant &&
                       moescope_comm_op;
  return present ? nullptr
                 : "no moescope recorder in this process (run it under `moescope record`, which "
                   "preloads libmoescope_inject.so)";
}

namespace {

std::mutex g_mutex;
unsigned g_active = 0;

constexpr unsigned kKnownFlags = MOESCOPE_TORCH_CAPTURE_COLLECTIVES | MOESCOPE_TORCH_CAPTURE_OPS;

void write_reason(char* out, size_t size, const std::string& text) {
  if (!out || size == 0) return;
  std::snprintf(out, size, "%s", text.c_str());
}

// True when the library holding the recorder (the preloaded shim) also interposes NCCL, i.e. it
// defines ncclAllReduce itself: then every NCCL call is already recorded there, with GPU times.
// The no-NCCL shim variant (`moescope record --no-nccl`) has no ncclX symbol at all.
bool recorder_interposes_nccl() {
  Dl_info recorder{};
  if (!dladdr(reinterpret_cast<void*>(&moescope_comm_op), &recorder) || !recorder.dli_fname) {
    return false;
  }
  void* handle = dlopen(recorder.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return false;
  void* all_reduce = dlsym(handle, "ncclAllReduce");
  Dl_info owner{};
  const bool own = all_reduce && dladdr(all_reduce, &owner) && owner.dli_fname &&
                   std::strcmp(owner.dli_fname, recorder.dli_fname) == 0;
  dlclose(handle);
  return own;
}

void stop_locked() {
  if (g_active & MOESCOPE_TORCH_CAPTURE_OPS) stop_operator_capture();
  if (g_active & MOESCOPE_TORCH_CAPTURE_COLLECTIVES) stop_collective_capture();
  g_active = 0;
}

}  // namespace
}  // namespace moescope::torch_capture

using namespace moescope::torch_capture;

extern "C" {

MOESCOPE_TORCH_CAPTURE_API int moescope_torch_capture_start(unsigned flags, char* reason,
                                                            size_t reason_size) {
  write_reason(reason, reason_size, "");
  try {
    std::lock_guard lock(g_mutex);
    if (flags == 0 || (flags & ~kKnownFlags)) {
      char text[96];
      std::snprintf(text, sizeof(text), "flags 0x%x: expected a combination of 0x%x", flags,
                    kKnownFlags);
      write_reason(reason, reason_size, text);
      return -1;
    }
    if (const char* missing = missing_recorder_reason()) {
      write_reason(reason, reason_size, missing);
      return -1;
    }
    std::string why;
    bool started = true;
    if (flags & MOESCOPE_TORCH_CAPTURE_COLLECTIVES) {
      started = start_collective_capture(recorder_interposes_nccl(), &why);
    } else if (g_active & MOESCOPE_TORCH_CAPTURE_COLLECTIVES) {
      stop_collective_capture();
    }
    if (started && (flags & MOESCOPE_TORCH_CAPTURE_OPS)) {
      started = start_operator_capture(&why);
    } else if (started && (g_active & MOESCOPE_TORCH_CAPTURE_OPS)) {
      stop_operator_capture();
    }
    if (!started) {
      g_active = flags;  // whatever part did start is stopped with the rest
      stop_locked();
      write_reason(reason, reason_size, why);
      return -1;
    }
    g_active = flags;
    return 0;
  } catch (const std::exception& error) {
    write_reason(reason, reason_size, std::string("torch capture failed: ") + error.what());
    return -1;
  } catch (...) {
    write_reason(reason, reason_size, "torch capture failed: unknown error");
    return -1;
  }
}

MOESCOPE_TORCH_CAPTURE_API void moescope_torch_capture_stop(void) {
  try {
    std::lock_guard lock(g_mutex);
    stop_locked();
  } catch (...) {
    // Locking failed: nothing was changed.
  }
}

MOESCOPE_TORCH_CAPTURE_API const char* moescope_torch_capture_built_for(void) {
  return MOESCOPE_TORCH_CAPTURE_BUILT_FOR;
}

MOESCOPE_TORCH_CAPTURE_API unsigned moescope_torch_capture_active(void) {
  std::lock_guard lock(g_mutex);
  return g_active;
}

}  // extern "C"
