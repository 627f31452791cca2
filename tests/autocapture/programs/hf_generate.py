"""Inference with a tiny Hugging Face Mixtral (CPU): torch.no_grad() and model.generate, no
training step, nothing of moescope in it. Prints the model forwards it ran and the tokens they
took in, counted by the program's own forward pre-hook, as JSON.

usage: hf_generate.py BATCH PROMPT_TOKENS NEW_TOKENS
"""
import json
import sys

import torch
import transformers

from hf_moe_train import tiny_config


def main():
    batch, prompt, new = (int(value) for value in sys.argv[1:4])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = tiny_config("mixtral")
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    seen = {"forwards": 0, "tokens": 0}

    def count(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        seen["forwards"] += 1
        seen["tokens"] += int(ids.numel())

    model.register_forward_pre_hook(count, with_kwargs=True)
    prompt_ids = torch.randint(3, 128, (batch, prompt), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                       max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       pad_token_id=0)
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
