"""replace_moe_blocks: Hugging Face transformers' sparse MoE blocks -> moescope MoELayers.

Each block whose math the runtime computes exactly becomes an HFMoEBlock (an MoELayer returning
the tensor the block returned) carrying the block's weights:

| family (block class)                   | router                                          | experts |
| --- | --- | --- |
| Mixtral (MixtralSparseMoeBlock)        | softmax, top-k, weights renormalised             | SwiGLU |
| Qwen3-MoE (Qwen3MoeSparseMoeBlock)     | softmax, top-k, renormalised iff norm_topk_prob  | SwiGLU |
| OLMoE (OlmoeSparseMoeBlock)            | softmax, top-k, renormalised iff norm_topk_prob  | SwiGLU |
| DeepSeek-V3 (DeepseekV3MoE)            | sigmoid, e_score_correction_bias for selection, group-limited (sum of top-2), renormalised iff norm_topk_prob, x routed_scaling_factor | SwiGLU + shared experts |

Refused with UnsupportedMoEBlock naming the difference: Qwen2-MoE (its shared expert is scaled
by a sigmoid gate, which the runtime's shared experts lack), GPT-OSS (clamped SwiGLU with
alpha and expert biases, softmax over the top-k logits), any other block whose class name says
MoE, a non-SiLU activation, and Mixtral's router jitter noise (training-time input scaling).

Layouts: HF stores gate_up_proj [E, 2F, H] and down_proj [E, H, F] (nn.functional.linear
weights); the runtime w_gate_up [E, H, 2F] and w_down [E, F, H]: the copies are transposes, the
gate/up halves keep their order. The router weight is copied into the runtime's fp32 gate.
The replaced model's state_dict names therefore differ from the HF checkpoint's.
"""

from typing import List, Optional

import torch
from torch import nn

from .layer import MoEConfig, MoELayer


class UnsupportedMoEBlock(ValueError):
    """A block replace_moe_blocks cannot replace without changing the model's function."""


class HFMoEBlock(MoELayer):
    """An MoELayer in place of an HF sparse MoE block: hidden [B, S, H] -> [B, S, H].

    The balancing losses the config enables are in `last_output.aux_loss` (collect_aux_loss)."""

    def __init__(self, config, family, process_group=None, backend_device="cpu"):
        super().__init__(config, process_group, backend_device)
        self.family = family

    def forward(self, hidden_states):
        return super().forward(hidden_states).output


def _activation_is_silu(model_config, block) -> bool:
    act = getattr(getattr(block, "experts", None), "act_fn", None)
    name = getattr(model_config, "hidden_act", None)
    if name is not None:
        return name in ("silu", "swish")
    return isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


def _describe(block) -> str:
    return type(block).__name__


def _config_for(block, model_config) -> Optional[tuple]:
    """(family, MoEConfig fields) for a supported block, None when `block` is not an MoE block;
    raises UnsupportedMoEBlock for an MoE block whose math differs."""
    name = type(block).__name__
    if name in ("Qwen2MoeSparseMoeBlock",):
        raise UnsupportedMoEBlock(
            f"{name}: Qwen2-MoE scales its shared expert by sigmoid(shared_expert_gate(x)); "
            "moescope's shared experts have no such gate, so the replaced model would compute "
            "another function")
    if name.startswith("GptOss") and name.endswith("MLP"):
        raise UnsupportedMoEBlock(
            f"{name}: GPT-OSS experts use a clamped SwiGLU with alpha and biases and route by a "
            "softmax over the top-k logits; moescope's experts are plain SwiGLU without biases")
    fields = None
    if name in ("MixtralSparseMoeBlock", "Qwen3MoeSparseMoeBlock", "OlmoeSparseMoeBlock"):
        family = {"MixtralSparseMoeBlock": "mixtral", "Qwen3MoeSparseMoeBlock": "qwen3_moe",
                  "OlmoeSparseMoeBlock": "olmoe"}[name]
        if getattr(block, "jitter_noise", 0) and block.jitter_noise > 0:
            raise UnsupportedMoEBlock(
                f"{name}: router_jitter_noise={block.jitter_noise} scales the input randomly in "
                "training; moescope's router has no jitter (set it to 0)")
        gate = block.gate
        normalize = True if family == "mixtral" else bool(gate.norm_topk_prob)
        fields = dict(score_function="softmax", normalize_top_k_weights=normalize,
                      top_k=int(gate.top_k))
    elif name == "DeepseekV3MoE":
        family = "deepseek_v3"
        gate = block.gate
        shared = block.shared_experts
        fields = dict(score_function="sigmoid", normalize_top_k_weights=bool(gate.norm_topk_prob),
                      routed_scaling_factor=float(gate.routed_scaling_factor),
                      num_groups=int(gate.num_group), group_top_k=int(gate.topk_group),
                      top_k=int(gate.top_k), enable_expert_bias=True, num_shared_experts=1,
                      shared_ffn_hidden_size=int(shared.gate_proj.weight.shape[0]))
    elif "moe" in name.lower() and isinstance(getattr(block, "experts", None), nn.Module) and \
            hasattr(block, "gate"):
        raise UnsupportedMoEBlock(
            f"{name}: not a block moescope.runtime knows (Mixtral, Qwen3-MoE, OLMoE, "
            "DeepSeek-V3); its routing may differ, so it is not replaced")
    else:
        return None
    if not _activation_is_silu(model_config, block):
        raise UnsupportedMoEBlock(
            f"{name}: hidden_act={getattr(model_config, 'hidden_act', '?')}; moescope's experts "
            "are SwiGLU (silu)")
    experts = block.experts
    gate_up = experts.gate_up_proj
    fields.update(hidden_size=int(gate_up.shape[2]), ffn_hidden_size=int(gate_up.shape[1] // 2),
                  num_experts=int(gate_up.shape[0]))
    return family, fields


@torch.no_grad()
def _copy_weights(layer: HFMoEBlock, block, family: str) -> None:
    layer.gate_weight.copy_(block.gate.weight.float())
    experts = block.experts
    # HF [E, 2F, H] / [E, H, F] -> runtime [E, H, 2F] / [E, F, H]; this rank keeps its slots.
    w_gate_up = experts.gate_up_proj.detach().transpose(1, 2).to(layer.w_gate_up.dtype)
    w_down = experts.down_proj.detach().transpose(1, 2).to(layer.w_down.dtype)
    layer.load_full_expert_weights(w_gate_up.to(layer.w_gate_up.device),
                                   w_down.to(layer.w_down.device))
    if family == "deepseek_v3":
        layer.expert_bias.copy_(block.gate.e_score_correction_bias.float())
        shared = block.shared_experts
        gate_up_shared = torch.cat([shared.gate_proj.weight, shared.up_proj.weight], dim=0)
        layer.shared_w_gate_up.copy_(gate_up_shared.t().unsqueeze(0))
        layer.shared_w_down.copy_(shared.down_proj.weight.t().unsqueeze(0))


def replace_moe_blocks(model: nn.Module, process_group=None, backend_device: str = "cpu",
                       **config_overrides) -> List[str]:
    """Replaces every supported sparse MoE block of `model` (in place) by an HFMoEBlock with the
    block's weights and routing; returns the names of the replaced modules.

    `process_group` spreads each layer's experts over its ranks (every rank calls this together
    on the same model, with the same weights: each rank keeps its experts' slice).
    `config_overrides` set other MoEConfig fields on every layer (aux_loss_coeff,
    enable_expert_bias, num_redundant_experts, gate_logit_skew, capacity_factor, ...); the
    fields that define the block's function (sizes, top_k, score function, normalisation,
    groups, scaling) come from the block. The new layers take the block's dtype and device.

    Raises UnsupportedMoEBlock (a ValueError) naming the first MoE block whose math differs,
    before anything is replaced, and ValueError when the model has no MoE block at all or when
    the model asks for HF's router logits (output_router_logits: HF records them from its
    router class, which is gone; use aux_loss_coeff and collect_aux_loss instead).
    """
    model_config = getattr(model, "config", None)
    if model_config is not None and getattr(model_config, "output_router_logits", False):
        raise ValueError(
            "replace_moe_blocks: model.config.output_router_logits is True, but the replaced "
            "blocks expose no HF router logits; set it to False and pass aux_loss_coeff=... "
            "(then add moescope.runtime.collect_aux_loss(model) to the loss)")
    fixed = {"hidden_size", "ffn_hidden_size", "num_experts", "top_k", "score_function",
             "normalize_top_k_weights", "routed_scaling_factor", "num_groups", "group_top_k",
             "num_shared_experts", "shared_ffn_hidden_size", "layer_index"}
    clash = fixed & set(config_overrides)
    if clash:
        raise ValueError(f"replace_moe_blocks: {sorted(clash)} come from the model's blocks")
    found = []  # (parent, attribute, full name, block, family, fields), in module order
    for name, module in model.named_modules():
        result = _config_for(module, model_config)
        if result is None:
            continue
        parent_name, _, attribute = name.rpartition(".")
        found.append((model.get_submodule(parent_name), attribute, name, module) + result)
    if not found:
        raise ValueError(
            f"replace_moe_blocks: {type(model).__name__} has no sparse MoE block moescope knows "
            "(Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3)")
    replaced = []
    for layer_index, (parent, attribute, name, block, family, fields) in enumerate(found):
        config = MoEConfig(**{**config_overrides, **fields, "layer_index": layer_index})
        if family == "deepseek_v3" and not config_overrides.get("enable_expert_bias", True):
            raise ValueError("replace_moe_blocks: DeepSeek-V3 selects experts with its "
                             "e_score_correction_bias; enable_expert_bias cannot be False")
        reference = block.experts.gate_up_proj
        layer = HFMoEBlock(config, family, process_group, backend_device)
        layer.to(device=reference.device)
        if reference.dtype != torch.float32:
            # The router stays fp32 (moescope computes routing in fp32, as DeepSeek-V3 does).
            for name_ in ("w_gate_up", "w_down", "shared_w_gate_up", "shared_w_down"):
                if hasattr(layer, name_):
                    getattr(layer, name_).data = getattr(layer, name_).data.to(reference.dtype)
        _copy_weights(layer, block, family)
        layer.train(block.training)
        setattr(parent, attribute, layer)
        replaced.append(name)
    return replaced


def moe_layers(model: nn.Module) -> List[MoELayer]:
    """The moescope MoELayers of `model`, in module order."""
    return [module for module in model.modules() if isinstance(module, MoELayer)]


def collect_aux_loss(model: nn.Module) -> torch.Tensor:
    """Sum of the balancing losses of the last forward of every MoELayer in `model` (0 when the
    layers compute none): add it to the training loss."""
    losses = [layer.last_output.aux_loss for layer in moe_layers(model)
              if layer.last_output is not None]
    if not losses:
        return torch.zeros(())
    return torch.stack([loss.float() for loss in losses]).sum()
