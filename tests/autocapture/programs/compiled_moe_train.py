"""A tiny Hugging Face Mixtral trained a few steps under torch.compile (CPU), nothing of
moescope in it. Prints, as the last line of stdout, a JSON object of what Dynamo did
(torch._dynamo.utils.counters: unique graphs, graph breaks, recompiles) and the tokens per
and the loss, so a run under `moescope record` can be compared with a plain one: the same
line means the same graphs and the same numbers. Every warning is shown (simplefilter
"always"), so one moescope caused would show on stderr.

usage: compiled_moe_train.py BACKEND STEPS   (BACKEND: aot_eager | inductor)
"""
import json
import os
import sys
import warnings

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_moe_train import tiny_config  # noqa: E402


def main():
    backend, steps = sys.argv[1], int(sys.argv[2])
    warnings.simplefilter("always")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("mixtral"))
    compiled = torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        tokens = torch.randint(0, 128, (4, 32), generator=generator)
        loss = compiled(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    from torch._dynamo.utils import counters
    stats = {
        "unique_graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "graph_break_reasons": sorted(counters["graph_break"]),
        "recompiles": sum(counters["recompiles"].values()),
        "loss": round(float(loss.detach()), 4),
    }
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
