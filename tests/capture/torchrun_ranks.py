"""Two-rank CPU job for `torchrun --nproc_per_node 2` under `moescope record`: Gloo
all-reduce, an NVTX range and an expert-load sample per rank. Prints one line per rank."""
import gc
import os

import nvtx
import torch
import torch.distributed as dist

import moescope


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with nvtx.annotate("allreduce_step", domain="train"):
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
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
