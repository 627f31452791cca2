"""FSDP2 (torch.distributed.fsdp.fully_shard) on Gloo, 2 ranks under torchrun (CPU): every
block's parameters are all-gathered in forward and backward and its gradients
reduce-scattered; no all-to-all anywhere. Nothing of moescope in it.

usage: torchrun --nproc_per_node 2 fsdp_gloo_train.py STEPS
"""
import gc
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def main():
    steps = int(sys.argv[1])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    width = 512
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width),
                                                      torch.nn.ReLU()) for _ in range(6)])
    for block in model:
        fully_shard(block)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(8, width, generator=torch.Generator().manual_seed(dist.get_rank()))
    for step in range(steps):
        loss = model(data).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
