"""A small torch CUDA program for the GPU capture check (tests/device/capture_run.sh).

Run under `moescope record`; capture_verify then finds in its trace: an HtoD and a DtoH copy of
exactly BYTES bytes, a device allocation of at least BYTES, the fill and matmul kernels (each
correlated to its launch call) and the synchronization. Prints "CAPTURE_BYTES <bytes>".
"""
import sys

import torch

if not torch.cuda.is_available():  # the dry run and the device-build test stop here
    print("capture_torch_program: no CUDA device (none visible to torch)", flush=True)
    sys.exit(77)  # tests/device/no_cuda_device.h
n = 2048
tensor_bytes = n * n * 4  # float32
device = torch.device("cuda")

host = torch.randn(n, n).pin_memory()
x = host.to(device, non_blocking=True)  # HtoD memcpy of tensor_bytes
w = torch.empty(n, n, device=device)  # a fresh caching-allocator segment: cudaMalloc
w.fill_(0.5)  # a kernel
for _ in range(5):
    y = x @ w  # matmul kernels
torch.cuda.synchronize()  # a synchronization record
out = torch.empty(n, n, pin_memory=True)
out.copy_(y)  # DtoH memcpy of tensor_bytes (pinned: one copy, not staged chunks)
assert out.shape == (n, n)
print("CAPTURE_BYTES", tensor_bytes)
