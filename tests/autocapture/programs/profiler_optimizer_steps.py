"""torch.profiler around 8 training steps of a small model, with no prof.step() calls: the
exported Kineto trace names each optimizer step "Optimizer.step#AdamW.step". Writes the trace
to the path given."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
optimizer = torch.optim.AdamW(model.parameters())
data = torch.randn(64, 256)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
    for step in range(8):
        for micro_batch in range(6):  # repeated work inside a step: not a step of its own
            with torch.profiler.record_function("micro_batch"):
                loss = model(data).square().mean()
                loss.backward()
        optimizer.step()
        optimizer.zero_grad()
profiler.export_chrome_trace(sys.argv[1])
