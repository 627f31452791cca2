"""Tiny Hugging Face transformers MoE causal LMs (float32, CPU, eager attention) for the
moescope.runtime tests, and the tolerances the tests hold them to."""

import torch

NUM_EXPERTS = 8
TOP_K = 2
HIDDEN = 32
VOCAB = 64

# fp32 equality after replace_moe_blocks: the runtime sums the same products in another order
# (grouped GEMMs over expert-sorted rows, its own combine), so results differ by rounding only
# (measured on these models: logits within 6e-8 of |logits| <= 0.4, gradients within 4e-7 of
# each parameter's largest gradient entry).
LOGITS_ATOL = 1e-6
GRAD_RTOL = 1e-5   # relative to the largest gradient entry of the parameter
LOSS_RTOL = 1e-5   # 50 AdamW steps: every step's loss relative to the original's

_COMMON = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, num_experts_per_tok=TOP_K,
               tie_word_embeddings=False, output_router_logits=False)

FAMILIES = {
    "mixtral": ("mixtral", dict(num_local_experts=NUM_EXPERTS, intermediate_size=32,
                                router_jitter_noise=0.0)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=NUM_EXPERTS, intermediate_size=32, head_dim=8,
                                    moe_intermediate_size=16, norm_topk_prob=True)),
    "olmoe": ("olmoe", dict(num_experts=NUM_EXPERTS, intermediate_size=32, norm_topk_prob=False)),
    "deepseek_v3": ("deepseek_v3", dict(n_routed_experts=NUM_EXPERTS, n_group=2, topk_group=1,
                                        n_shared_experts=1, intermediate_size=32,
                                        moe_intermediate_size=16, num_hidden_layers=3,
                                        first_k_dense_replace=1, num_key_value_heads=4,
                                        kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
                                        qk_nope_head_dim=8, v_head_dim=8, head_dim=8,
                                        routed_scaling_factor=2.5)),
    "qwen2_moe": ("qwen2_moe", dict(num_experts=NUM_EXPERTS, intermediate_size=32,
                                    moe_intermediate_size=16, shared_expert_intermediate_size=16)),
    "gpt_oss": ("gpt_oss", dict(num_local_experts=NUM_EXPERTS, intermediate_size=32, head_dim=8,
                                sliding_window=8)),
}


def build(family, seed=0, **overrides):
    """A tiny randomly initialised causal LM of `family`."""
    import transformers
    model_type, extra = FAMILIES[family]
    config = transformers.AutoConfig.for_model(model_type, **{**_COMMON, **extra, **overrides})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                continue
            if name.endswith((".gate.weight", ".router.weight")):
                parameter.normal_(0.0, 0.5)  # varied routing (some layouts start at zero)
            else:
                parameter.normal_(0.0, 0.05 if "embed" in name else 0.02)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.1)
    return model


def tokens(batch=2, length=12, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=generator)
