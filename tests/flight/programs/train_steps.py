"""A plain single-process training loop (no distributed): --steps N optimizer steps, each a
forward, backward and SGD step, and the step number on stdout every 50 steps."""

import argparse
import statistics
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--quiet", action="store_true", help="only the timing line at the end")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step_times = []
    for step in range(args.steps):
        began = time.perf_counter()
        loss = model(torch.randn(8, args.width)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step_times.append(time.perf_counter() - began)
        if step % 50 == 0 and not args.quiet:
            print(f"step {step}", flush=True)
    # The median step after the first 10 (warm-up), for bench/flight_recorder_bench.py.
    print(f"median_step_us {statistics.median(step_times[10:] or step_times) * 1e6:.1f}")
    print("done", flush=True)


if __name__ == "__main__":
    main()
