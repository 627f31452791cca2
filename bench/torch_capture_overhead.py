"""Cost of the C++ torch capture (libmoescope_torch_capture.so) on a small CPU training loop.

Run under `moescope record` on two Gloo ranks (DDP, so every step has C++ all-reduces)::

    PYTHONPATH=profiler/python OMP_NUM_THREADS=1 build/bin/moescope record -o /tmp/tc.%r.moetrace \\
        -- torchrun --standalone --nproc_per_node 2 bench/torch_capture_overhead.py

Every round runs STEPS training steps in each mode, in a rotating order, in the same processes:
  plain        recorded, capture off (the baseline)
  plain-again  recorded, capture off again (A/A control: the noise floor of the ratios)
  collectives  the default capture (c10d collectives)
  ops          --torch-ops (collectives + every operator with its input shapes)
Rank 0 prints the median step time of each mode and its ratio to `plain`, then the cost of one
collective alone: a 1-element all_reduce on a single-rank Gloo group, capture off vs default.
"""
import argparse
import gc
import statistics
import time

import torch
import torch.distributed as dist

from moescope.autocapture import torch_capture

MODES = ("plain", "plain-again", "collectives", "ops")


class TinyTransformer(torch.nn.Module):
    """Two pre-norm transformer blocks, width 64, 4 heads; input [batch, tokens, 64]."""

    def __init__(self, width=64, layers=2):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True,
                                             norm_first=True) for _ in range(layers))
        self.head = torch.nn.Linear(width, 16)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def set_mode(mode):
    torch_capture.stop()
    if mode == "collectives":
        started, reason = torch_capture.start(collectives=True)
    elif mode == "ops":
        started, reason = torch_capture.start(collectives=True, ops=True)
    else:
        return
    if not started:
        raise SystemExit("torch capture not started: " + reason)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per mode per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(TinyTransformer())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(8, 32, 64)
    targets = torch.randint(0, 16, (8, 32))

    def step():
        optimizer.zero_grad()
        logits = model(inputs)
        torch.nn.functional.cross_entropy(logits.reshape(-1, 16), targets.reshape(-1)).backward()
        optimizer.step()

    for _ in range(10):
        step()
    times = {mode: [] for mode in MODES}
    for round_index in range(args.rounds):
        order = MODES[round_index % len(MODES):] + MODES[:round_index % len(MODES)]
        for mode in order:
            set_mode(mode)
            dist.barrier()
            for _ in range(args.steps):
                start = time.perf_counter()
                step()
                times[mode].append(time.perf_counter() - start)
    set_mode("plain")
    # One collective alone: all_reduce of one element on a group of this rank only.
    own_group = [dist.new_group([rank]) for rank in range(dist.get_world_size())][dist.get_rank()]
    one = torch.ones(1)
    call_times = {"off": [], "collectives": []}
    for round_index in range(args.rounds):
        for mode in (("off", "collectives") if round_index % 2 == 0 else ("collectives", "off")):
            set_mode(mode)
            for _ in range(200):
                start = time.perf_counter()
                dist.all_reduce(one, group=own_group)
                call_times[mode].append(time.perf_counter() - start)
    set_mode("plain")
    if dist.get_rank() == 0:
        base = statistics.median(times["plain"])
        print("torch capture overhead, %d ranks, %d steps x %d rounds per mode (rank 0)"
              % (dist.get_world_size(), args.steps, args.rounds))
        print("%-12s %14s %8s" % ("mode", "median step", "ratio"))
        for mode in MODES:
            median = statistics.median(times[mode])
            print("%-12s %11.2f ms %8.3f" % (mode, median * 1e3, median / base))
        off = statistics.median(call_times["off"])
        on = statistics.median(call_times["collectives"])
        print("one all_reduce (1 element, 1-rank Gloo group): %.1f us plain, %.1f us captured "
              "(+%.1f us)" % (off * 1e6, on * 1e6, (on - off) * 1e6))
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
