#!/usr/bin/env python3
"""A plain PyTorch Mixture-of-Experts language model, trained on the texts moe_train ships.

No moescope runtime here: the model is ordinary PyTorch (a top-k softmax router and a list of
expert MLPs per layer). Three lines of annotation make its expert load visible to moescope:

    moescope.step(step)                       # once per step
    moescope.expert_load(layer, counts)       # once per MoE layer and step
    with moescope.range("forward"): ...       # optional spans

Run it under the profiler:

    moescope record -o py.%r.moetrace -- python3 samples/python/train_moe.py --steps 20
    moescope report py.*.moetrace

Without ``moescope record`` the annotations do nothing. With --print-expert-load the script
prints every count it logged ("expert_load rank R step S layer L local c0 c1 ..."), so the
trace can be checked against it.
"""

import argparse
import glob
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import moescope
except ImportError:  # running from a source checkout: the module lives in profiler/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "profiler", "python"))
    import moescope

SAMPLE_DIR = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(SAMPLE_DIR, "..", "moe_train", "data")
VOCAB = 256  # byte-level tokens


def load_text(path):
    """Bytes of a .txt file or of every .txt file of a folder, in name order."""
    files = sorted(glob.glob(os.path.join(path, "*.txt"))) if os.path.isdir(path) else [path]
    if not files or not all(os.path.isfile(f) for f in files):
        sys.exit("train_moe.py: --data %s holds no readable .txt file" % path)
    data = b"".join(open(f, "rb").read() for f in files)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


class Expert(nn.Module):
    """SwiGLU feed-forward network: [tokens, hidden] -> [tokens, hidden]."""

    def __init__(self, hidden, ffn):
        super().__init__()
        self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class MoE(nn.Module):
    """Top-k softmax router over a list of experts, with an optional per-expert logit skew."""

    def __init__(self, hidden, ffn, num_experts, top_k, skew):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(hidden, ffn) for _ in range(num_experts))
        # Expert 0 gets +skew, decreasing linearly to 0 for the last expert.
        self.register_buffer("skew", torch.linspace(skew, 0.0, num_experts))

    def forward(self, x):
        """x [B, S, H] -> (output [B, S, H], tokens per expert [E])."""
        tokens = x.reshape(-1, x.shape[-1])
        scores = F.softmax(self.router(tokens) + self.skew, dim=-1)
        weights, chosen = scores.topk(self.top_k, dim=-1)  # [T, K]
        output = torch.zeros_like(tokens)
        for expert_index, expert in enumerate(self.experts):
            token_index, slot = (chosen == expert_index).nonzero(as_tuple=True)
            if token_index.numel():
                expert_out = expert(tokens[token_index]) * weights[token_index, slot, None]
                output.index_add_(0, token_index, expert_out)
        counts = torch.bincount(chosen.flatten(), minlength=len(self.experts))
        return output.view_as(x), counts


class Block(nn.Module):
    def __init__(self, args, skew):
        super().__init__()
        self.heads = args.heads
        self.norm1 = nn.LayerNorm(args.hidden)
        self.qkv = nn.Linear(args.hidden, 3 * args.hidden)
        self.proj = nn.Linear(args.hidden, args.hidden)
        self.norm2 = nn.LayerNorm(args.hidden)
        self.moe = MoE(args.hidden, args.ffn_hidden, args.experts, args.top_k, skew)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, h // self.heads).permute(
            2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, s, h))
        moe_out, counts = self.moe(self.norm2(x))
        return x + moe_out, counts


class MoELanguageModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, args.hidden)
        self.position = nn.Embedding(args.seq_len, args.hidden)
        self.blocks = nn.ModuleList(
            Block(args, args.gate_skew if args.skew_layer in (-1, i) else 0.0)
            for i in range(args.layers))
        self.norm = nn.LayerNorm(args.hidden)
        # Small initial weights: the tied output layer then starts near uniform, loss ~ ln(256).
        for parameter in self.parameters():
            if parameter.dim() == 2:
                nn.init.normal_(parameter, std=0.02)

    def forward(self, tokens):
        """tokens [B, S] -> (logits [B, S, V], per-layer tokens per expert)."""
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1]))
        counts = []
        for block in self.blocks:
            x, layer_counts = block(x)
            counts.append(layer_counts)
        return self.norm(x) @ self.embed.weight.t(), counts


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn-hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--gate-skew", type=float, default=0.0)
    parser.add_argument("--skew-layer", type=int, default=-1)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--print-expert-load", action="store_true")
    args = parser.parse_args()
    if args.top_k > args.experts:
        parser.error("--top-k %d is larger than --experts %d" % (args.top_k, args.experts))
    if args.hidden % args.heads:
        parser.error("--hidden %d is not divisible by --heads %d" % (args.hidden, args.heads))
    return args


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    rank = int(os.environ.get("RANK", "0"))
    text = load_text(args.data)
    model = MoELanguageModel(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(args.seed + rank)
    print("train_moe.py: %d bytes of text, %d layers x %d experts, top-%d, %s"
          % (text.numel(), args.layers, args.experts, args.top_k,
             "recording" if moescope.recording() else "not recording"), flush=True)

    for step in range(args.steps):
        start = time.perf_counter()
        moescope.step(step)
        starts = torch.randint(0, text.numel() - args.seq_len - 1, (args.batch,),
                               generator=generator)
        window = torch.stack([text[s:s + args.seq_len + 1] for s in starts.tolist()])
        with moescope.range("forward"):
            logits, counts = model(window[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))
        with moescope.range("backward"):
            loss.backward()
        with moescope.range("optimizer"):
            optimizer.step()
            optimizer.zero_grad()
        for layer, layer_counts in enumerate(counts):
            moescope.expert_load(layer, layer_counts, step=step, rank=rank)
            if args.print_expert_load:
                print("expert_load rank %d step %d layer %d local %s"
                      % (rank, step, layer, " ".join(str(int(c)) for c in layer_counts)))
        loads = [c.max().item() / max(c.float().mean().item(), 1e-9) for c in counts]
        moescope.counter("loss", loss.item())
        print("step %d loss %.6f max/mean %s step_ms %.2f"
              % (step, loss.item(), " ".join("L%d %.2f" % (i, v) for i, v in enumerate(loads)),
                 1000 * (time.perf_counter() - start)), flush=True)
    if not math.isfinite(loss.item()):
        sys.exit("train_moe.py: the loss is not finite")


if __name__ == "__main__":
    main()
