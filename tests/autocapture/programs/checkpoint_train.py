"""A tiny Hugging Face Mixtral trained with activation checkpointing (CPU), nothing of moescope
in it: each decoder layer's forward runs again during backward.

usage: checkpoint_train.py reentrant|non_reentrant STEPS
"""
import sys

import torch
import transformers

from hf_moe_train import tiny_config


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("mixtral"))
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": mode == "reentrant"})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        tokens = torch.randint(0, 128, (4, 32), generator=generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
