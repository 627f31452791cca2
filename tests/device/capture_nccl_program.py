"""A 1-rank NCCL communicator for the GPU capture check (tests/device/capture_run.sh).

Run under `moescope record`. Each all-reduce is enqueued behind ~20 large matmuls, so its GPU
start is far later than its enqueue: capture_verify checks that the recorded start/end come from
the GPU (CUDA events) and line up with the CUPTI kernel times. Then one all-to-all, and a fourth
all-reduce held about 2 s on the GPU behind a sleeping kernel: still pending a second after it
was issued, it gets a collective_open record (what a rank hung in NCCL waits in) before its op.
Prints "CAPTURE_BYTES <all-reduce bytes>".
"""
import os
import socket
import sys

import torch
import torch.distributed as dist

if not torch.cuda.is_available():  # the dry run and the device-build test stop here
    print("capture_nccl_program: no CUDA device (none visible to torch)", flush=True)
    sys.exit(77)  # tests/device/no_cuda_device.h
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(port))
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))

elements = 1 << 20
x = torch.ones(elements, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
for _ in range(3):
    for _ in range(20):
        b = a @ a
    dist.all_reduce(x)
source = torch.arange(elements, device="cuda", dtype=torch.float32)
target = torch.empty_like(source)
dist.all_to_all_single(target, source)
torch.cuda.synchronize()
assert torch.equal(target, source)
torch.cuda._sleep(4_000_000_000)  # GPU clock cycles: about 2 s at the H100/H200's ~2 GHz
dist.all_reduce(x)
torch.cuda.synchronize()
dist.destroy_process_group()
print("CAPTURE_BYTES", elements * 4)
