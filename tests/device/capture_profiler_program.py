"""The program's own torch.profiler with CUDA activities under `moescope record` (part
"profiler"): CUPTI allows one subscriber per process (CUPTI 13.0), so the two tools must not
crash or lose each other's buffers. The program must finish, its profiler must see its kernels,
and moescope's trace must read (capture_verify). Prints "CAPTURE_BYTES <profiler kernels>".
"""
import sys

import torch

if not torch.cuda.is_available():  # the dry run and the device-build test stop here
    print("capture_profiler_program: no CUDA device (none visible to torch)", flush=True)
    sys.exit(77)  # tests/device/no_cuda_device.h
a = torch.randn(2048, 2048, device="cuda")
for _ in range(3):  # before the profiler: moescope's CUPTI capture is on
    b = a @ a
torch.cuda.synchronize()
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities) as profiler:
    for _ in range(5):
        b = a @ b
    torch.cuda.synchronize()
kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
print("profiler: torch.profiler saw %d CUDA events" % len(kernels))
for _ in range(3):  # after it
    b = a @ b
torch.cuda.synchronize()
if not kernels:
    sys.exit("capture_profiler_program: torch.profiler saw no CUDA kernels (its CUPTI was lost)")
print("CAPTURE_BYTES", len(kernels))
