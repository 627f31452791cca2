/* moescope/torch_capture/torch_capture.h — what PyTorch does in C++, into the moescope trace.
 *
 * libmoescope_torch_capture.so is loaded into a Python process that already imported torch
 * (moescope.autocapture.torch_capture loads it with ctypes under `moescope record`). It is built
 * against one LibTorch version (moescope_torch_capture_built_for) and must only be loaded into a
 * process running that version; the Python loader checks the version file written next to the
 * library before it loads anything.
 *
 * It does not contain a recorder: the recorder C API (moescope/recorder.h) is resolved at load
 * time from the capture shim `moescope record` preloads (or libmoescope_recorder.so), so a
 * process has exactly one recorder. Without one, start() fails with a reason.
 *
 * What it records (docs/capture.md, "PyTorch capture from C++"):
 *   COLLECTIVES  every torch.distributed collective that goes through the c10d operators, also
 *                those issued from C++ (DDP's gradient buckets, FSDP): one comm op with kind,
 *                bytes, dtype, process group, rank and group size, per-peer bytes of all-to-all;
 *                times from the backend's execution (Gloo worker threads) when the backend
 *                reports it. NCCL collectives are left to the shim's NCCL interposer when the
 *                shim has one (it records GPU times); only the group's description is added.
 *   OPS          every ATen operator, autograd node and user scope as a span on its thread,
 *                named with its input shapes ("aten::addmm, sizes = [[8, 16], [16, 4]]").
 *
 * Nothing here throws, aborts or blocks the caller; failures return non-zero with a reason.
 */
#ifndef MOESCOPE_TORCH_CAPTURE_H
#define MOESCOPE_TORCH_CAPTURE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MOESCOPE_TORCH_CAPTURE_API __attribute__((visibility("default")))
#else
#define MOESCOPE_TORCH_CAPTURE_API
#endif

enum moescope_torch_capture_flags {
  MOESCOPE_TORCH_CAPTURE_COLLECTIVES = 1u << 0, /* c10d collectives as comm ops (cheap) */
  MOESCOPE_TORCH_CAPTURE_OPS = 1u << 1,         /* every operator as a span with shapes (costly) */
};

/* Starts capturing what `flags` asks for (moescope_torch_capture_flags). Returns 0 on success.
 * On failure returns non-zero, captures nothing and writes a NUL-terminated reason into
 * `reason` (at most reason_size bytes, may be NULL). Calling it again replaces the flags. */
MOESCOPE_TORCH_CAPTURE_API int moescope_torch_capture_start(unsigned flags, char* reason,
                                                            size_t reason_size);

/* Stops every capture started here (callbacks and kernels removed). Idempotent. */
MOESCOPE_TORCH_CAPTURE_API void moescope_torch_capture_stop(void);

/* The torch version (torch.__version__) this library was compiled against, e.g. "2.11.0+cu130". */
MOESCOPE_TORCH_CAPTURE_API const char* moescope_torch_capture_built_for(void);

/* The flags currently captured (0 when stopped). */
MOESCOPE_TORCH_CAPTURE_API unsigned moescope_torch_capture_active(void);

#ifdef __cplusplus
}
#endif

#endif /* MOESCOPE_TORCH_CAPTURE_H */
