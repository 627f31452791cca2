"""An ordinary PyTorch training loop over a Hugging Face `transformers` MoE model with a tiny
config (CPU): nothing in it knows about moescope. The router of layer HOT_LAYER is biased toward
expert HOT_EXPERT, so that layer is imbalanced; the other layer is not.

usage: hf_moe_train.py FAMILY STEPS   (FAMILY: mixtral | qwen2_moe | qwen3_moe | deepseek_v3)
With torchrun and WORLD_SIZE > 1, gradients are averaged with Gloo all_reduce by hand.
"""
import gc
import os
import sys

import torch
import torch.distributed as dist
import transformers

HOT_LAYER, HOT_EXPERT = 1, 3


def tiny_config(family):
    common = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if family == "mixtral":
        return transformers.MixtralConfig(num_local_experts=8, num_experts_per_tok=2, **common)
    if family == "qwen2_moe":
        return transformers.Qwen2MoeConfig(num_experts=8, num_experts_per_tok=2,
                                           moe_intermediate_size=48,
                                           shared_expert_intermediate_size=48, **common)
    if family == "qwen3_moe":
        return transformers.Qwen3MoeConfig(num_experts=8, num_experts_per_tok=2,
                                           moe_intermediate_size=48, head_dim=16, **common)
    if family == "deepseek_v3":
        return transformers.DeepseekV3Config(
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
            n_shared_experts=1, first_k_dense_replace=0, n_group=1, topk_group=1,
            kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=16, **common)
    raise SystemExit(f"unknown family {family}")


def router_of(layer):
    block = getattr(layer, "block_sparse_moe", None) or layer.mlp
    return block.gate


def main():
    family, steps = sys.argv[1], int(sys.argv[2])
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family))
    # HOT_LAYER's router sees every token shifted along its HOT_EXPERT row: that expert's logit
    # rises by 20 for every token, the others' barely move, so nearly every token goes there.
    router = router_of(model.model.layers[HOT_LAYER])

    def biased(module, args):
        row = module.weight[HOT_EXPERT].detach()
        return (args[0] + 20.0 * row / row.square().sum(),) + args[1:]

    router.register_forward_pre_hook(biased)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1 + (dist.get_rank() if distributed else 0))
    for step in range(steps):
        tokens = torch.randint(0, 128, (4, 32), generator=generator)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        if distributed:
            for parameter in model.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= dist.get_world_size()
        optimizer.step()
        optimizer.zero_grad()
        if step % 5 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if distributed:
        dist.destroy_process_group()
        # torch's Gloo workers can drop their last work (and its tensors' Python references)
        # after this returns, and abort the process if the interpreter is finalizing by then
        # ("terminate called without an active exception", ~1 run in 13 here): collecting the
        # process group now joins them while Python is alive.
        gc.collect()


if __name__ == "__main__":
    main()
