"""Two-rank CPU job for `torchrun --nproc_per_node 2` under `moescope record`: per training step
(a tiny model and its SGD optimizer, which the zero-code capture takes as the step) a Gloo
all-reduce inside an NVTX range and an expert-load sample. Rank 1 works a little longer each
step, so rank 0 waits for it in the all-reduce. Prints one line per rank.

  --steps N   training steps (default 1)"""
import argparse
import gc
import os
import time

import nvtx
import torch
import torch.distributed as dist

import moescope


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(args.steps):
        loss = model(torch.randn(4, 8)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        if rank == 1:
            time.sleep(0.02)
        with nvtx.annotate("allreduce_step", domain="train"):
            value = torch.tensor([float(rank + 1)])
            dist.all_reduce(value)
        optimizer.step()
        moescope.expert_load(0, [rank, 10 + rank, 20 + rank])
    print("rank %d of %d sum %.0f" % (rank, dist.get_world_size(), value.item()), flush=True)
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
