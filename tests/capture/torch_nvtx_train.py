"""A small PyTorch CPU training run annotated with NVTX (the `nvtx` package and torch's own
`torch.cuda.nvtx`, which works without a GPU) and moescope's Python module, used by the capture
tests under `moescope record`.

Prints one deterministic line per step (same output recorded or not). Options:
  --steps N        training steps (default 4)
  --exit-code C    exit with C after training (tests that the code passes through)
  --wait-after S   after step S, print "waiting" and sleep (tests interrupting a run)
"""
import argparse
import sys
import time

import nvtx
import torch

import moescope

NUM_EXPERTS = 4


class TinyMoE(torch.nn.Module):
    """A router and 4 expert MLPs; top-1 routing. x: [num_tokens, hidden]."""

    def __init__(self, hidden=16):
        super().__init__()
        self.router = torch.nn.Linear(hidden, NUM_EXPERTS)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(NUM_EXPERTS))

    def forward(self, x):
        with nvtx.annotate("router", domain="train"):
            expert_index = self.router(x).argmax(dim=-1)  # [num_tokens]
        out = torch.zeros_like(x)
        with nvtx.annotate("experts", domain="train"):
            for expert, layer in enumerate(self.experts):
                chosen = expert_index == expert
                if chosen.any():
                    out[chosen] = layer(x[chosen])
        return out + self.router(x).sum(dim=-1, keepdim=True) * 0.1, expert_index


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--wait-after", type=int, default=-1)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyMoE()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(64, 16)
    target = torch.randn(64, 16)
    for step in range(args.steps):
        moescope.step(step)
        with nvtx.annotate("train_step", domain="train"):
            with moescope.range("forward"):
                out, expert_index = model(data)
                loss = torch.nn.functional.mse_loss(out, target)
            moescope.expert_load(0, torch.bincount(expert_index, minlength=NUM_EXPERTS))
            moescope.counter("loss", loss.item())
            with moescope.range("backward"):
                optimizer.zero_grad()
                loss.backward()
                torch.cuda.nvtx.range_push("optimizer_step")  # torch's NVTX, default domain
                optimizer.step()
                torch.cuda.nvtx.range_pop()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)
        if step == args.wait_after:
            print("waiting", flush=True)
            time.sleep(60)
    nvtx.mark("done", domain="train")
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
