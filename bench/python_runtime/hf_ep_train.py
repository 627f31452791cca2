"""Expert-parallel training of a tiny Hugging Face MoE model swapped to moescope's MoELayer, one
process per rank under torchrun (Gloo, CPU), with or without moescope.runtime.ExpertBalancer.

    moescope record -o base.%r.moetrace -- torchrun --nproc_per_node 2 \
        bench/python_runtime/hf_ep_train.py --balancer 0 --steps 120
    moescope record -o bal.%r.moetrace -- torchrun --nproc_per_node 2 \
        bench/python_runtime/hf_ep_train.py --balancer 1 --steps 120
    moescope diff base.*.moetrace --against bal.*.moetrace

Every rank builds the same model (same seed), replace_moe_blocks spreads each layer's experts
over the WORLD group (num_redundant_experts spare slots for replicas), and the router is skewed
toward expert 0 by `--skew` added to its logit (MoEConfig.gate_logit_skew). Each rank trains
on its own token stream (data parallel for the replicated weights: their gradients are averaged
over the ranks; the experts' gradients already hold every rank's tokens and are divided by the
world size, so every gradient is that of the mean loss). Both runs build the layers with
enable_expert_bias (the bias stays 0 without the balancer), so they differ only by the
balancer's step(). Rank 0 prints one line per step and a JSON summary at the end (--summary).
"""

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python_runtime"))

import hf_models  # noqa: E402
import moescope  # noqa: E402
from moescope.runtime import ExpertBalancer, MoELayer, replace_moe_blocks, set_training_step  # noqa: E402


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="qwen3_moe", choices=["qwen3_moe", "mixtral"])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--balancer", type=int, default=1)
    parser.add_argument("--skew", type=float, default=4.0, help="logit added to expert 0")
    parser.add_argument("--num-redundant-experts", type=int, default=2)
    parser.add_argument("--interval", type=int, default=10, help="steps between decisions")
    parser.add_argument("--rule", default="net", choices=["net", "imbalance"],
                        help="how the balancer judges a planned placement (ExpertBalancer)")
    parser.add_argument("--bias-rate", type=float, default=0.01)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--summary", default="", help="rank 0 writes a JSON summary here")
    return parser.parse_args()


def learnable_batch(batch, length, generator):
    """[batch, length] token ids: a random start, then token -> (5 * token + 3) % VOCAB (a fixed
    permutation the model can learn, so the loss curve says something), with 1 token in 8
    replaced by a random one (noise the model cannot learn)."""
    ids = torch.empty(batch, length, dtype=torch.long)
    ids[:, 0] = torch.randint(0, hf_models.VOCAB, (batch,), generator=generator)
    for position in range(1, length):
        ids[:, position] = (5 * ids[:, position - 1] + 3) % hf_models.VOCAB
    noise = torch.rand(batch, length, generator=generator) < 0.125
    ids[noise] = torch.randint(0, hf_models.VOCAB, (int(noise.sum()),), generator=generator)
    return ids


def main():
    arguments = parse_arguments()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    model = hf_models.build(arguments.family, seed=arguments.seed, num_hidden_layers=2,
                            hidden_size=64, **({"moe_intermediate_size": 64}
                                               if arguments.family == "qwen3_moe" else
                                               {"intermediate_size": 64}))
    skew = [arguments.skew] + [0.0] * (hf_models.NUM_EXPERTS - 1)
    replace_moe_blocks(model, process_group=dist.group.WORLD, enable_expert_bias=True,
                       expert_bias_update_rate=arguments.bias_rate, gate_logit_skew=skew,
                       num_redundant_experts=arguments.num_redundant_experts)
    expert_parameters = {id(p) for m in model.modules() if isinstance(m, MoELayer)
                         for p in (m.w_gate_up, m.w_down)}
    optimizer = torch.optim.AdamW(model.parameters(), lr=arguments.lr)
    balancer = None
    if arguments.balancer:
        balancer = ExpertBalancer(model, optimizer, interval_steps=arguments.interval,
                                  warmup_steps=arguments.interval, imbalance_threshold=1.05,
                                  transfer_bytes_per_second=1e9, rule=arguments.rule)
    generator = torch.Generator().manual_seed(1000 + rank)
    losses, applied = [], 0
    start = time.perf_counter()
    for step in range(arguments.steps):
        if balancer is None:
            set_training_step(step)  # the balancer marks steps itself
        ids = learnable_batch(arguments.batch, arguments.length, generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        # Data-parallel gradients of the dense parameters in one bucket (as DDP does); the
        # experts' own gradients stay on their rank (the balancer sums replicas' in its hook).
        dense = [p for p in model.parameters()
                 if p.grad is not None and id(p) not in expert_parameters]
        bucket = torch.cat([p.grad.reshape(-1) for p in dense])
        dist.all_reduce(bucket)
        offset = 0
        for parameter in dense:
            parameter.grad.copy_(bucket[offset:offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.div_(world)
        optimizer.step()
        if balancer is not None:
            applied += sum(int(d["applied"]) for d in balancer.step())
        optimizer.zero_grad()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        mean_loss = float(mean_loss) / world
        moescope.counter("loss", mean_loss)
        losses.append(mean_loss)
        if rank == 0 and (step % 10 == 0 or step == arguments.steps - 1):
            print(f"step {step} loss {mean_loss:.4f}", flush=True)
    seconds = time.perf_counter() - start
    for module in model.modules():
        if isinstance(module, MoELayer):
            module.drain_trace_statistics()
    if rank == 0:
        tail = losses[len(losses) * 3 // 4:]
        summary = {"balancer": bool(arguments.balancer), "steps": arguments.steps,
                   "losses": losses, "mean_loss_last_quarter": sum(tail) / len(tail),
                   "applied_rebalances": applied, "seconds": seconds}
        print(json.dumps({k: v for k, v in summary.items() if k != "losses"}), flush=True)
        if arguments.summary:
            with open(arguments.summary, "w") as out:
                json.dump(summary, out)
    dist.destroy_process_group()
    # torch's Gloo workers can drop their last work (and its tensors' Python references)
    # after this returns, and abort the process if the interpreter is finalizing by then
    # ("terminate called without an active exception", ~1 run in 13 here): collecting the
    # process group now joins them while Python is alive.
    gc.collect()


if __name__ == "__main__":
    main()
