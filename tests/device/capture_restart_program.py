"""Two recordings in one process after CUDA is up, and the exit order (part "restart").

Run under `moescope record -o FIRST`: CUDA work, then the recording is stopped and started again
into SECOND through the recorder's C API (as a program recording windows of its run does), then
more CUDA work ending in a DtoH copy of BYTES bytes right before exit. capture_verify checks that
SECOND has GPU activity (CUPTI delivers into the new recording), the final copy is in it (the
exit flush ran before the CUDA runtime's teardown) and the shim's note says so.
Prints "CAPTURE_BYTES <bytes>". Usage: capture_restart_program.py SECOND_TRACE
"""
import ctypes
import sys

import torch

if not torch.cuda.is_available():  # the dry run and the device-build test stop here
    print("capture_restart_program: no CUDA device (none visible to torch)", flush=True)
    sys.exit(77)  # tests/device/no_cuda_device.h
second = sys.argv[1]
shim = ctypes.CDLL(None)  # the preloaded shim's recorder C API is in the global scope
shim.moescope_recorder_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
shim.moescope_recorder_start.restype = ctypes.c_int

n = 1024
a = torch.randn(n, n, device="cuda")
for _ in range(3):
    b = a @ a
torch.cuda.synchronize()
shim.moescope_recorder_stop()
if shim.moescope_recorder_start(second.encode(), None) != 0:
    sys.exit("capture_restart_program: moescope_recorder_start failed")
for _ in range(3):
    b = a @ b
out = torch.empty(n, n, pin_memory=True)
out.copy_(b)  # the last GPU work of the process: its record must survive the exit
print("CAPTURE_BYTES", n * n * 4)
