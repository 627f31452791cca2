"""Run with torchrun --nproc_per_node 2: rank 1 sleeps a known time before each all-to-all, so
rank 0 waits that long inside it for rank 1 to arrive. Prints the sleep (JSON) for the test to
compare with the wait the report measures. With a third argument PREFIX, each rank also writes
PREFIX.RANK.json: the CLOCK_MONOTONIC ns at which it called each all-to-all, so that the test
compares a wait with how late rank 1 really arrived (on a loaded machine a sleep overruns)."""
import gc
import json
import sys
import time

import torch
import torch.distributed as dist

SLEEP_S = float(sys.argv[1]) if len(sys.argv) > 1 else 0.08
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
TIMES_PREFIX = sys.argv[3] if len(sys.argv) > 3 else None

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
tokens = torch.randn(64 * world, 16)
received = torch.empty_like(tokens)
dist.barrier()
entered_ns = []
for _ in range(ROUNDS):
    if rank == 1:
        time.sleep(SLEEP_S)
    entered_ns.append(time.monotonic_ns())
    dist.all_to_all_single(received, tokens)
if TIMES_PREFIX:
    with open(f"{TIMES_PREFIX}.{rank}.json", "w") as handle:
        json.dump(entered_ns, handle)
if rank == 0:
    print(json.dumps({"sleep_ms": SLEEP_S * 1e3, "rounds": ROUNDS}), flush=True)
dist.destroy_process_group()
# torch's Gloo workers can drop their last work (and its tensors' Python references)
# after this returns, and abort the process if the interpreter is finalizing by then
# ("terminate called without an active exception", ~1 run in 13 here): collecting the
# process group now joins them while Python is alive.
gc.collect()
