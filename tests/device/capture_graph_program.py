"""A CUDA-graph-captured training step with a collective, for the GPU check (part "graph").

Run under `moescope record`: one rank of NCCL, a step (matmul + all-reduce) captured with
torch.cuda.graph after a warm-up on a side stream (as torch's docs prescribe), replayed REPLAYS
times. The capture must not be broken by the shim (its event records and queries run in relaxed
capture mode, none on the capturing stream) and the replays must compute the right values.
capture_verify then finds the replays' kernels (through CUPTI) and the note that the
captured all-reduce's replays are not comm ops. Prints "CAPTURE_BYTES <replays>".
"""
import os
import socket
import sys

import torch
import torch.distributed as dist

REPLAYS = 5

if not torch.cuda.is_available():  # the dry run and the device-build test stop here
    print("capture_graph_program: no CUDA device (none visible to torch)", flush=True)
    sys.exit(77)  # tests/device/no_cuda_device.h
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(port))
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))

weight = torch.randn(1024, 1024, device="cuda") / 32
static_input = torch.randn(256, 1024, device="cuda")


def step():
    out = static_input @ weight
    dist.all_reduce(out)  # one rank: the sum is the tensor itself
    return out


side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):  # warm-up outside the capture (NCCL and cuBLAS set themselves up)
        step()
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()

graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_output = step()

for replay in range(REPLAYS):
    static_input.copy_(torch.randn_like(static_input))
    graph.replay()
    expected = static_input @ weight
    torch.cuda.synchronize()
    error = (static_output - expected).abs().max().item()
    assert error < 1e-3, f"replay {replay}: the graph computed wrong values (max error {error})"
dist.destroy_process_group()
print("graph: %d replays of a captured matmul + all-reduce, results right" % REPLAYS)
print("CAPTURE_BYTES", REPLAYS)
