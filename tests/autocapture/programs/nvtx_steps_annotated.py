"""The annotation module without step=: a loop with NVTX step ranges that records expert load
with `moescope.expert_load(layer, counts)` and never numbers its steps."""
import nvtx
import torch

import moescope

torch.manual_seed(0)
for step in range(8):
    with nvtx.annotate("train_step"):
        expert_index = torch.randint(0, 4, (64,))
        counts = torch.bincount(expert_index, minlength=4)
        counts[step % 4] += 100  # a different hot expert each step
        moescope.expert_load(0, counts)
        torch.randn(200, 200) @ torch.randn(200, 200)
print("done")
