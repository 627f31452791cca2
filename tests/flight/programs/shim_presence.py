"""Prints whether this process has moescope's shim mapped and what its LD_PRELOAD says; run by
torchrun under `moescope record --ranks` (tests/flight/flight_test.py)."""

import gc
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
with open("/proc/self/maps") as maps:
    mapped = any("libmoescope_inject" in line for line in maps)
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    loss = model(torch.randn(4, 8)).sum()
    optimizer.zero_grad()
    loss.backward()
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    optimizer.step()
print(f"rank {rank} shim_mapped={int(mapped)} "
      f"preload={'libmoescope_inject' in os.environ.get('LD_PRELOAD', '')}", flush=True)
dist.destroy_process_group()
# torch's Gloo workers can drop their last work (and its tensors' Python references)
# after this returns, and abort the process if the interpreter is finalizing by then
# ("terminate called without an active exception", ~1 run in 13 here): collecting the
# process group now joins them while Python is alive.
gc.collect()
