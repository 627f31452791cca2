"""Two Gloo ranks (torchrun --nproc-per-node 2) training a small DDP model for a few steps. No
collective is called from Python after the start-up: DDP all-reduces the gradient buckets from
C++, so only moescope's C++ capture can see them. Each rank writes what DDP must have sent to
REPORT_DIR/rank<N>.json (the only argument): its parameter bytes and the step count."""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

STEPS = 3


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(STEPS):
        optimizer.zero_grad()
        ddp(torch.randn(8, 16)).square().mean().backward()
        optimizer.step()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    with open(os.path.join(sys.argv[1], "rank%d.json" % rank), "w") as report:
        json.dump({"rank": rank, "param_bytes": param_bytes, "steps": STEPS}, report)
    dist.barrier()
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
