"""Megatron-Core's ``MoELayer`` and ``TopKRouter`` (CPU, partly).

A real ``MoELayer`` is built on the CPU (process groups stand in: nothing here communicates),
and the adapter must find it. Megatron's router forward moves its weight to CUDA, so on a
machine without a GPU the forward hook path cannot run: the router's own ``routing()`` (the
part of its forward after the gating matmul, the real top-k with token dropping) produces the
``(probs, routing_map)`` the hook would see, and the counts are checked against a top-k of the
same logits. The hook on a real forward is untested here (docs/autocapture-adapters.md).
"""

import sys
import types
import warnings

import pytest
import torch

from moescope.autocapture import moe_layers

warnings.filterwarnings("ignore")
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.transformer.moe.moe_layer import MoELayer  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

NUM_EXPERTS, TOP_K, HIDDEN = 8, 2, 32


def build_moe_layer(layer_number, **config):
    transformer_config = TransformerConfig(
        num_layers=2, hidden_size=HIDDEN, num_attention_heads=4, num_moe_experts=NUM_EXPERTS,
        moe_router_topk=TOP_K, moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0,
        use_cpu_initialization=True, **config)
    groups = types.SimpleNamespace(tp=None, cp=None, tp_cp=None, tp_dp_cp=None, ep=None,
                                   expt_tp=None, tp_ep=None, expt_dp=None)
    spec = get_gpt_layer_local_spec(num_experts=NUM_EXPERTS, moe_grouped_gemm=False).submodules.mlp
    return MoELayer(transformer_config, submodules=spec.submodules, layer_number=layer_number,
                    pg_collection=groups)


class Decoder(torch.nn.Module):
    """Megatron's paths: ``decoder.layers.N.mlp``; layer_number is global and 1-based."""

    def __init__(self, **config):
        super().__init__()
        self.layers = torch.nn.ModuleList()
        for layer_number in (5, 6):  # as on a later pipeline stage
            block = torch.nn.Module()
            block.mlp = build_moe_layer(layer_number, **config)
            block.mlp.router.set_layer_number(layer_number)
            self.layers.append(block)


def test_finds_moe_layers_numbered_like_megatron():
    model = torch.nn.Module()
    model.decoder = Decoder()
    layers = moe_layers.find_moe_layers(model)
    assert [(layer.path, layer.layer, layer.family) for layer in layers] == [
        ("decoder.layers.0.mlp", 4, "megatron"), ("decoder.layers.1.mlp", 5, "megatron")]
    assert all(type(layer.router).__name__ == "TopKRouter" for layer in layers)
    assert all((layer.num_experts, layer.top_k) == (NUM_EXPERTS, TOP_K) for layer in layers)


@pytest.mark.parametrize("capacity_factor", [None, 0.5])
def test_counts_from_the_routers_own_routing(capacity_factor):
    config = {} if capacity_factor is None else dict(moe_expert_capacity_factor=capacity_factor,
                                                     moe_token_drop_policy="probs")
    block = build_moe_layer(1, **config)
    layer = moe_layers.find_moe_layers(block)[0]
    logits = torch.randn(6, 4, NUM_EXPERTS, generator=torch.Generator().manual_seed(0))
    output = layer.router.routing(logits)  # (probs, routing_map), as forward returns them
    counts = layer.counts(output)
    selected = torch.topk(torch.softmax(logits.view(-1, NUM_EXPERTS), dim=-1), TOP_K).indices
    chosen = torch.bincount(selected.reshape(-1), minlength=NUM_EXPERTS)
    if capacity_factor is None:
        assert torch.equal(counts, chosen)
    else:  # tokens over an expert's capacity are dropped: counts are what experts receive
        capacity = int(capacity_factor * 24 * TOP_K / NUM_EXPERTS)
        assert torch.equal(counts, torch.clamp(chosen, max=capacity))
    meta = layer.counts(tuple(tensor.to("meta") for tensor in output))
    assert meta.device.type == "meta" and tuple(meta.shape) == (NUM_EXPERTS,)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
