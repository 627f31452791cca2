"""Two Gloo ranks (torchrun --nproc_per_node 2) under `moescope record` with the C++ torch capture
started by hand (PYTHONPATH=profiler/python): one of each torch.distributed collective on the
default group, all_to_all_single with uneven splits, and a DDP model on its own group ("ddp"),
whose gradient all-reduces come from C++. Each rank writes what it sent to REPORT_DIR/rank<N>.json
(the only argument)."""
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

from moescope.autocapture import torch_capture

DDP_STEPS = 3
# all_to_all_single: rows of 3 float32 sent to each rank; uneven and different per rank.
INPUT_SPLITS = {0: [1, 4], 1: [2, 5]}


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def main():
    started, reason = torch_capture.start()
    print("rank %s capture %s: %s" % (os.environ.get("RANK"), started, reason), file=sys.stderr)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sent = {}

    values = torch.ones(1000)
    dist.all_reduce(values)
    sent["all_reduce"] = nbytes(values)

    shard = torch.full((300,), float(rank))
    gathered = torch.empty(300 * world)
    dist.all_gather_into_tensor(gathered, shard)
    sent["all_gather_into_tensor"] = nbytes(shard)

    full = torch.ones(250 * world)
    reduced = torch.empty(250)
    dist.reduce_scatter_tensor(reduced, full)
    sent["reduce_scatter_tensor"] = nbytes(full)

    table = torch.arange(123, dtype=torch.int64)
    dist.broadcast(table, src=0)
    sent["broadcast"] = nbytes(table)

    input_splits = INPUT_SPLITS[rank]
    output_splits = [INPUT_SPLITS[source][rank] for source in range(world)]
    rows = torch.randn(sum(input_splits), 3)
    received = torch.empty(sum(output_splits), 3)
    dist.all_to_all_single(received, rows, output_split_sizes=output_splits,
                           input_split_sizes=input_splits)
    sent["all_to_all_single"] = nbytes(rows)
    row_bytes = 3 * rows.element_size()
    split_bytes = [split * row_bytes for split in input_splits]

    message = torch.zeros(77, dtype=torch.float64)
    if rank == 0:
        dist.send(message, dst=1)
        sent["send"] = nbytes(message)
    else:
        dist.recv(message, src=0)
        sent["recv"] = nbytes(message)

    ddp_group = dist.new_group(group_desc="ddp")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=ddp_group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(DDP_STEPS):
        optimizer.zero_grad()
        ddp(torch.randn(8, 16)).square().mean().backward()
        optimizer.step()
    param_bytes = sum(nbytes(p) for p in model.parameters())

    dist.barrier()
    report = {"rank": rank, "sent": sent, "all_to_all_split_bytes": split_bytes,
              "ddp_param_bytes": param_bytes, "ddp_steps": DDP_STEPS, "capture_started": started}
    with open(os.path.join(sys.argv[1], "rank%d.json" % rank), "w") as report_file:
        json.dump(report, report_file)
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
