"""Run by torchrun on Gloo: 12 steps of a tiny data-parallel SGD loop (gradients all-reduced by
hand, then optimizer.step), so steps come from the optimizer and collectives from Gloo."""
import gc
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(12):
    loss = model(torch.randn(32, 64)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    for parameter in model.parameters():
        dist.all_reduce(parameter.grad)
    optimizer.step()
os.write(1, f"rank {dist.get_rank()} done\n".encode())
dist.barrier()
dist.destroy_process_group()
# torch's Gloo workers can drop their last work (and its tensors' Python references)
# after this returns, and abort the process if the interpreter is finalizing by then
# ("terminate called without an active exception", ~1 run in 13 here): collecting the
# process group now joins them while Python is alive.
gc.collect()
