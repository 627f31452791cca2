"""Run with torchrun --nproc_per_node 2: the collectives a training program makes, on Gloo,
including all_to_all_single with uneven splits. Prints, per rank, what it sent (JSON), so the
test can compare the trace with it."""
import gc
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
sent = []

grad = torch.ones(1000, dtype=torch.float32) * rank
dist.all_reduce(grad)
sent.append(["all_reduce", grad.numel() * 4])

shard = torch.full((250,), float(rank), dtype=torch.bfloat16)
gathered = torch.empty(250 * world, dtype=torch.bfloat16)
dist.all_gather_into_tensor(gathered, shard)
sent.append(["all_gather", shard.numel() * 2])

full = torch.arange(64 * world, dtype=torch.float32)
piece = torch.empty(64, dtype=torch.float32)
dist.reduce_scatter_tensor(piece, full)
sent.append(["reduce_scatter", full.numel() * 4])

# Tokens to experts on each rank: uneven, different on each rank. Rows of 16 floats.
input_splits = [[3, 5], [7, 1]][rank]
output_splits = [[3, 7], [5, 1]][rank]
tokens = torch.randn(sum(input_splits), 16)
received = torch.empty(sum(output_splits), 16)
dist.all_to_all_single(received, tokens, output_splits, input_splits)
sent.append(["all_to_all", [rows * 16 * 4 for rows in input_splits]])

dist.broadcast(torch.zeros(10), src=1)
sent.append(["broadcast", 40])
# One write of the whole line: both ranks share the launcher's stdout, and print() may write the
# text and its newline separately, which interleaves the two ranks' lines.
os.write(1, (json.dumps({"rank": rank, "sent": sent}) + "\n").encode())
dist.destroy_process_group()
# torch's Gloo workers can drop their last work (and its tensors' Python references)
# after this returns, and abort the process if the interpreter is finalizing by then
# ("terminate called without an active exception", ~1 run in 13 here): collecting the
# process group now joins them while Python is alive.
gc.collect()
