"""Run with torchrun --nproc_per_node 2: Gloo collectives between two CPU processes."""
import gc
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
tensor = torch.arange(8, dtype=torch.float32) * (rank + 1)
dist.all_reduce(tensor)
gathered = [torch.zeros(2) for _ in range(world)]
dist.all_gather(gathered, torch.full((2,), float(rank)))
dist.barrier()
print(f"rank {rank}/{world} local {os.environ['LOCAL_RANK']} sum {tensor.tolist()} "
      f"gathered {[t.tolist() for t in gathered]}", flush=True)
dist.destroy_process_group()
# torch's Gloo workers can drop their last work (and its tensors' Python references)
# after this returns, and abort the process if the interpreter is finalizing by then
# ("terminate called without an active exception", ~1 run in 13 here): collecting the
# process group now joins them while Python is alive.
gc.collect()
