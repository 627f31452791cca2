"""A small data-parallel training loop on Gloo (CPU), run by torchrun, whose ranks can misbehave
on purpose, for the flight recorder's tests (tests/flight/flight_test.py):

  --steps N            training steps (one all_reduce of the gradients each, by hand)
  --stall-rank R       rank R sleeps --stall-seconds before its collective number --stall-at
  --raise-rank R       rank R raises RuntimeError at step --raise-at
  --segv-rank R        rank R dereferences NULL through ctypes at step --segv-at

Every rank prints "rank R done" at the end."""

import argparse
import ctypes
import gc
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--stall-at", type=int, default=5)
    parser.add_argument("--stall-seconds", type=float, default=0)
    parser.add_argument("--raise-rank", type=int, default=-1)
    parser.add_argument("--raise-at", type=int, default=5)
    parser.add_argument("--segv-rank", type=int, default=-1)
    parser.add_argument("--segv-at", type=int, default=5)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    flat = torch.zeros(sum(p.numel() for p in model.parameters()))
    collectives = 0
    for step in range(args.steps):
        inputs = torch.randn(16, 32)
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        loss.backward()
        if rank == args.raise_rank and step == args.raise_at:
            raise RuntimeError(f"boom from rank {rank} at step {step}")
        if rank == args.segv_rank and step == args.segv_at:
            ctypes.string_at(0)  # SIGSEGV inside a C call
        if rank == args.stall_rank and collectives == args.stall_at:
            print(f"rank {rank} stalls before collective {collectives}", flush=True)
            time.sleep(args.stall_seconds)
        offset = 0
        for parameter in model.parameters():
            flat[offset:offset + parameter.numel()] = parameter.grad.flatten()
            offset += parameter.numel()
        dist.all_reduce(flat)
        collectives += 1
        offset = 0
        for parameter in model.parameters():
            parameter.grad.copy_(flat[offset:offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
