"""Tiny Hugging Face ``transformers`` MoE models (CPU) and what their experts really received.

The same keyword arguments build the model under transformers 4.57 and 5.x, so one test file
runs against both module layouts. The ground truth of a forward is taken where the model
*uses* the routing, not where the capture reads it: with 4.x's ``nn.ModuleList`` experts, the
number of rows each expert module was called with; with 5.x's fused experts module (and
GPT-OSS's, in both), the expert indices it was passed, counted with ``torch.bincount``.
"""

import torch

NUM_EXPERTS = 8
TOP_K = 2
HIDDEN = 32
VOCAB = 64

_COMMON = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, num_experts_per_tok=TOP_K,
               tie_word_embeddings=False)

# family -> (transformers model type, extra config, number of MoE layers, their decoder indices)
FAMILIES = {
    "mixtral": ("mixtral", dict(num_local_experts=NUM_EXPERTS, intermediate_size=32,
                                router_jitter_noise=0.1), [0, 1]),
    "qwen2_moe": ("qwen2_moe", dict(num_experts=NUM_EXPERTS, intermediate_size=32,
                                    moe_intermediate_size=16, shared_expert_intermediate_size=16,
                                    num_hidden_layers=3, mlp_only_layers=[1]), [0, 2]),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=NUM_EXPERTS, intermediate_size=32, head_dim=8,
                                    moe_intermediate_size=16, norm_topk_prob=True), [0, 1]),
    "deepseek_v3": ("deepseek_v3", dict(n_routed_experts=NUM_EXPERTS, n_group=2, topk_group=1,
                                        n_shared_experts=1, intermediate_size=32,
                                        moe_intermediate_size=16, num_hidden_layers=3,
                                        first_k_dense_replace=1, num_key_value_heads=4,
                                        kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
                                        qk_nope_head_dim=8, v_head_dim=8, head_dim=8), [1, 2]),
    "olmoe": ("olmoe", dict(num_experts=NUM_EXPERTS, intermediate_size=32), [0, 1]),
    "gpt_oss": ("gpt_oss", dict(num_local_experts=NUM_EXPERTS, intermediate_size=32, head_dim=8,
                                sliding_window=8), [0, 1]),
}


def build(family, seed=0):
    """A tiny randomly initialised causal LM of ``family`` (float32, CPU, eager attention)."""
    import transformers
    model_type, extra, _ = FAMILIES[family]
    config = transformers.AutoConfig.for_model(model_type, **{**_COMMON, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                continue
            if name.endswith((".gate.weight", ".router.weight", ".router.bias")):
                # Routers of some layouts start at zero (every expert tied): std 0.5 gives
                # varied routing.
                parameter.normal_(0.0, 0.5)
            else:
                # Small layers keep each router's input close to the token embedding, which
                # bias_router_toward relies on.
                parameter.normal_(0.0, 0.05 if "embed" in name else 0.01)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.normal_(0.0, 0.1)  # DeepSeek-V3 selects on scores + this bias
    return model


def plain_llama():
    import transformers
    config = transformers.AutoConfig.for_model("llama", **{
        k: v for k, v in _COMMON.items() if k != "num_experts_per_tok"}, intermediate_size=32)
    return transformers.AutoModelForCausalLM.from_config(config)


def tokens(batch=2, length=12, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=generator)


class ExpertsReceived:
    """Per MoE block, the tokens each expert was given in the forwards since :meth:`take`."""

    def __init__(self, blocks):
        self.received = {}
        self.handles = []
        for path, block in blocks.items():
            experts = block.experts
            if isinstance(experts, torch.nn.ModuleList):
                for index, expert in enumerate(experts):
                    self.handles.append(expert.register_forward_pre_hook(
                        self._rows_hook(path, index, len(experts))))
            else:
                self.handles.append(experts.register_forward_pre_hook(
                    self._indices_hook(path, experts), with_kwargs=True))

    def _counts(self, path, num_experts):
        return self.received.setdefault(path, torch.zeros(num_experts, dtype=torch.int64))

    def _rows_hook(self, path, index, num_experts):
        def hook(module, args):
            self._counts(path, num_experts)[index] += args[0].reshape(-1, args[0].shape[-1]).shape[0]
        return hook

    def _indices_hook(self, path, experts):
        num_experts = experts.num_experts

        def hook(module, args, kwargs):
            integer = [value for value in list(args) + list(kwargs.values())
                       if isinstance(value, torch.Tensor) and not value.is_floating_point()]
            assert len(integer) == 1, "expected one tensor of expert indices"
            indices = integer[0].reshape(-1)
            indices = indices[(indices >= 0) & (indices < num_experts)]
            self._counts(path, num_experts).add_(torch.bincount(indices, minlength=num_experts))
        return hook

    def take(self):
        received, self.received = self.received, {}
        return received

    def remove(self):
        for handle in self.handles:
            handle.remove()


def bias_router_toward(model, routers, chosen, expert, strength=20.0):
    """Makes ``chosen`` (one of ``routers``) send every token to ``expert``, leaving the
    others' choices to their own weights.

    Hidden dimension 0 of every token embedding becomes a large constant, so after the norm
    each router input has a big, same-signed feature 0. Every router stops reading that
    feature (weight column 0 zeroed: each router weight is ``[num_experts, hidden]``); the
    chosen router's row ``expert`` reads it with a large positive weight. Works when every
    layer's output is small next to the embedding (``build`` initialises them so).
    """
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = 1.0
        for router in routers:
            router.weight[:, 0] = 0.0
        chosen.weight[expert, 0] = strength
        correction_bias = getattr(chosen, "e_score_correction_bias", None)
        if correction_bias is not None:
            # DeepSeek-V3 first picks groups by their best scores: a sigmoid score of 1 may
            # lose to two good ones elsewhere; its selection bias lifts the expert's group too.
            correction_bias[expert] += strength
