"""Writes a PyTorch profiler (Kineto) Chrome trace of a tiny MoE-like CPU loop.

usage: write_kineto_trace.py OUT.json [--gzip]
       write_kineto_trace.py --handler FOLDER WORKER [CYCLES] [--rank R --world N --store FILE]
Steps are marked with profiler.step() (ProfilerStep#N ranges); memory profiling is on. With
--handler, torch's tensorboard_trace_handler writes FOLDER/WORKER.TIME.pt.trace.json.gz itself,
one file per profiler cycle (CYCLES, default 1, of 4 active steps each). With --world, the
process is rank R of a Gloo job of N ranks (FILE: the rendezvous file, the same for all ranks).
"""
import gzip
import shutil
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule


def option(name: str):
    """The value after --name on the command line, or None."""
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def main() -> None:
    handler = sys.argv[1] == "--handler"
    cycles = int(sys.argv[4]) if handler and len(sys.argv) > 4 and sys.argv[4].isdigit() else 1
    out = sys.argv[1]
    if option("--world"):
        # One rank of a job: the profiler then writes distributedInfo (rank, world_size).
        torch.distributed.init_process_group(
            "gloo", init_method="file://" + option("--store"), rank=int(option("--rank")),
            world_size=int(option("--world")))
    torch.manual_seed(0)
    experts = [torch.nn.Linear(64, 64) for _ in range(4)]
    router = torch.nn.Linear(64, 4)
    tokens = torch.randn(256, 64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=4, repeat=cycles),
                 on_trace_ready=torch.profiler.tensorboard_trace_handler(
                     sys.argv[2], worker_name=sys.argv[3], use_gzip=True) if handler else None
                 ) as prof:
        for _ in range(5 * cycles + 1):
            with record_function("moe.layer"):
                with record_function("moe.route"):
                    choice = router(tokens).argmax(dim=1)
                with record_function("moe.experts"):
                    out_tokens = torch.zeros_like(tokens)
                    for e, expert in enumerate(experts):
                        mask = choice == e
                        out_tokens[mask] = expert(tokens[mask])
                out_tokens.sum().backward()
            prof.step()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if handler:
        return
    prof.export_chrome_trace(out)
    if len(sys.argv) > 2 and sys.argv[2] == "--gzip":
        with open(out, "rb") as plain, gzip.open(out + ".gz", "wb") as packed:
            shutil.copyfileobj(plain, packed)


if __name__ == "__main__":
    main()
