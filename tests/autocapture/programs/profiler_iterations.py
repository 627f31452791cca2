"""A tiny Hugging Face Mixtral trained ITERATIONS iterations inside torch.profiler with
prof.step() after each one (CPU), nothing of moescope in it; exports the profiler's Chrome
trace to the path given.

usage: profiler_iterations.py ITERATIONS TRACE.json
"""
import sys

import torch
import transformers

from hf_moe_train import tiny_config


def main():
    iterations, path = int(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("mixtral"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for _ in range(iterations):
            tokens = torch.randint(0, 128, (2, 16), generator=generator)
            loss = model(input_ids=tokens, labels=tokens).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            profiler.step()
    profiler.export_chrome_trace(path)
    print(f"loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
