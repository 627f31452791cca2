"""Forward+backward tokens/s of one Hugging Face sparse MoE block against the moescope MoELayer
replace_moe_blocks puts in its place (same weights, same routing), measured in the same run.

    python bench/python_runtime/swapped_layer_bench.py [--family qwen3_moe] [--device cpu]
        [--hidden 512] [--ffn 1024] [--experts 8] [--top-k 2] [--tokens 2048] [--reps 10]
        [--hf-experts grouped_mm|eager|batched_mm] [--dtype float32|bfloat16]

The two modules alternate (ABAB...) after a warm-up, so drift of a shared machine hits both;
the result is the ratio of medians, with each side's median and min. On CUDA each timing ends
with torch.cuda.synchronize(). Prints one JSON line.
"""

import argparse
import json
import statistics
import time

import torch


def build_block(family, hidden, ffn, experts, top_k, experts_implementation):
    import transformers
    common = dict(hidden_size=hidden, num_experts_per_tok=top_k, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=4, vocab_size=64)
    if family == "mixtral":
        config = transformers.MixtralConfig(**common, num_local_experts=experts,
                                            intermediate_size=ffn, router_jitter_noise=0.0)
        block = transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(config)
    else:
        config = transformers.Qwen3MoeConfig(**common, num_experts=experts,
                                             moe_intermediate_size=ffn, norm_topk_prob=True)
        block = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(config)
    # What a model built by from_config/from_pretrained dispatches its experts to (transformers 5
    # picks "grouped_mm" by default there; a block built alone has None, i.e. the eager loop).
    config._experts_implementation = experts_implementation
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(0.0, 0.02)
        block.gate.weight.normal_(0.0, 0.5)
    return block, config


def time_step(module, hidden, upstream, device):
    hidden = hidden.detach().requires_grad_(True)
    start = time.perf_counter()
    module(hidden).backward(upstream)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    module.zero_grad(set_to_none=True)
    return seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--family", default="qwen3_moe", choices=["qwen3_moe", "mixtral"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--hf-experts", default="grouped_mm",
                        choices=["eager", "grouped_mm", "batched_mm"],
                        help="config._experts_implementation of the HF block")
    arguments = parser.parse_args()

    from moescope.runtime import replace_moe_blocks

    torch.manual_seed(0)
    dtype = getattr(torch, arguments.dtype)
    block, config = build_block(arguments.family, arguments.hidden, arguments.ffn,
                                arguments.experts, arguments.top_k, arguments.hf_experts)
    block = block.to(arguments.device, dtype)
    holder = torch.nn.Module()
    holder.block = block
    import copy
    swapped_holder = copy.deepcopy(holder)
    replace_moe_blocks(swapped_holder, backend_device=arguments.device)
    swapped = swapped_holder.block
    hidden = torch.randn(1, arguments.tokens, arguments.hidden, device=arguments.device,
                         dtype=dtype)
    upstream = torch.randn_like(hidden)
    with torch.no_grad():
        difference = (swapped(hidden) - block(hidden)).abs().max().item()
    times = {"hf": [], "moescope": []}
    for rep in range(arguments.warmup + arguments.reps):
        for name, module in (("hf", block), ("moescope", swapped)):
            seconds = time_step(module, hidden, upstream, arguments.device)
            if rep >= arguments.warmup:
                times[name].append(seconds)
    median = {name: statistics.median(values) for name, values in times.items()}
    result = {
        "family": arguments.family, "device": arguments.device, "dtype": arguments.dtype,
        "hidden": arguments.hidden, "ffn": arguments.ffn, "experts": arguments.experts,
        "top_k": arguments.top_k, "tokens": arguments.tokens, "reps": arguments.reps,
        "torch_threads": torch.get_num_threads(),
        "hf_experts_implementation": str(getattr(config, "_experts_implementation", None)),
        "max_abs_output_difference": difference,
        "hf_tokens_per_s": arguments.tokens / median["hf"],
        "moescope_tokens_per_s": arguments.tokens / median["moescope"],
        "hf_min_s": min(times["hf"]), "moescope_min_s": min(times["moescope"]),
        "speedup_moescope_over_hf": median["hf"] / median["moescope"],
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
