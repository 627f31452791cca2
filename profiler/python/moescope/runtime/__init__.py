"""moescope's LibTorch MoE runtime from Python (docs/runtime.md, "From Python").

    from moescope.runtime import MoEConfig, MoELayer, replace_moe_blocks, ExpertBalancer

    layer = MoELayer(MoEConfig(hidden_size=512, ffn_hidden_size=1024, num_experts=8))
    out = layer(hidden)                      # MoEOutput: output, aux_loss, tokens_per_expert, ...

    replace_moe_blocks(hf_model)             # Mixtral, Qwen3-MoE, OLMoE, DeepSeek-V3 blocks
    balancer = ExpertBalancer(hf_model, optimizer, interval_steps=20)
    ...; optimizer.step(); balancer.step()

The layer is moescope::runtime::MoELayer registered with PyTorch's dispatcher
(torch.ops.moescope.moe_layer_forward, torch.classes.moescope.MoELayer); its parameters are
ordinary nn.Parameters. Under ``moescope record`` the layer writes the same trace records as in
C++ (phases, expert load, all-to-all bytes, rebalance decisions) with no extra call.
"""

from ._library import RuntimeUnavailable, load as load_library
from .balancer import ExpertBalancer
from .hf import UnsupportedMoEBlock, collect_aux_loss, replace_moe_blocks
from .layer import MoEConfig, MoELayer, MoEOutput, set_training_step

__all__ = [
    "ExpertBalancer", "MoEConfig", "MoELayer", "MoEOutput", "RuntimeUnavailable",
    "UnsupportedMoEBlock", "collect_aux_loss", "load_library", "replace_moe_blocks",
    "set_training_step",
]
