"""Expert load of torchtitan's real ``MoE`` blocks, unmodified (tiny, CPU).

Two decoder-like layers, ``layers.0.moe`` (softmax top-2) and ``layers.1.moe`` (sigmoid,
group-limited top-2 with the load-balancing ``expert_bias``, DeepSeek-V3 style). The ground
truth is ``num_local_tokens_per_expert_E``, which the MoE block itself computes from its
router's output and passes to its routed experts.
"""

import sys

import pytest
import torch
from torchtitan.models.common.config_utils import (make_moe_config, make_routed_experts_config,
                                                   make_router_config)

from moescope.autocapture import expert_load_capture, moe_layers

NUM_EXPERTS, TOP_K, DIM = 8, 2, 32
NUM_TOKENS = 2 * 6


def moe_config(group_limited):
    normal = {name: (lambda p: torch.nn.init.normal_(p, std=0.5))
              for name in ("weight", "w1_EFD", "w2_EDF", "w3_EFD")}
    return make_moe_config(
        num_experts=NUM_EXPERTS,
        router=make_router_config(
            dim=DIM, num_experts=NUM_EXPERTS, gate_param_init=normal, top_k=TOP_K,
            score_func="sigmoid" if group_limited else "softmax",
            num_expert_groups=2 if group_limited else None,
            num_limited_groups=1 if group_limited else None),
        routed_experts=make_routed_experts_config(
            dim=DIM, hidden_dim=16, num_experts=NUM_EXPERTS, top_k=TOP_K, param_init=normal,
            comm_backend="standard"))


class Layer(torch.nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.moe = moe

    def forward(self, x):
        return x + self.moe(x)


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleDict({
            "0": Layer(moe_config(group_limited=False).build()),
            "1": Layer(moe_config(group_limited=True).build())})
        with torch.no_grad():
            for parameter in self.parameters():
                parameter.normal_(0.0, 0.5)  # torchtitan leaves them for init_weights
            self.layers["1"].moe.expert_bias_E.normal_(0.0, 0.1)

    def forward(self, x):
        for layer in self.layers.values():
            x = layer(x)
        return x


def inputs(seed):
    return torch.randn(2, NUM_TOKENS // 2, DIM, generator=torch.Generator().manual_seed(seed))


def record_block_counts(model):
    """What each MoE block handed its routed experts, per forward, keyed by layer index."""
    seen = []

    def hook(module, args, layer):
        seen.append((layer, args[3].to(torch.int64).clone()))
    for index, layer in model.layers.items():
        layer.moe.routed_experts.register_forward_pre_hook(
            lambda module, args, index=int(index): hook(module, args, index))
    return seen


def test_finds_both_blocks():
    layers = moe_layers.find_moe_layers(TinyModel())
    assert [(layer.path, layer.layer, layer.family) for layer in layers] == [
        ("layers.0.moe", 0, "torchtitan"), ("layers.1.moe", 1, "torchtitan")]
    assert all(type(layer.router).__name__ == "TokenChoiceTopKRouter" for layer in layers)
    assert all((layer.num_experts, layer.top_k) == (NUM_EXPERTS, TOP_K) for layer in layers)


def test_counts_equal_what_the_block_dispatched(recorder):
    model = TinyModel()
    truth = record_block_counts(model)
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        recorder.step = step
        model(inputs(step)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    expert_load_capture.flush()
    expected = {(step, layer): counts for step, (layer, counts) in
                zip([s for s in range(3) for _ in range(2)], truth)}
    recorded = recorder.by_step_and_layer()
    assert sorted(recorded) == sorted(expected)
    for key, counts in expected.items():
        assert counts.sum() == NUM_TOKENS * TOP_K
        assert torch.equal(recorded[key], counts), key


def test_expert_bias_toward_one_expert_shows_on_its_layer(recorder):
    model = TinyModel()
    with torch.no_grad():
        model.layers["1"].moe.expert_bias_E[5] = 100.0  # torchtitan's own selection bias
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    with torch.no_grad():
        model(inputs(0))
    recorded = recorder.by_step_and_layer()
    assert recorded[(0, 1)][5] == NUM_TOKENS and int(recorded[(0, 1)].argmax()) == 5
    assert recorded[(0, 0)][5] < NUM_TOKENS


def test_debug_forced_balance_is_seen_as_the_block_saw_it(recorder):
    model = TinyModel()
    for layer in model.layers.values():
        layer.moe.router._debug_force_load_balance = True  # round-robin expert ids
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    with torch.no_grad():
        model(inputs(0))
    balanced = torch.full((NUM_EXPERTS,), NUM_TOKENS * TOP_K // NUM_EXPERTS, dtype=torch.int64)
    for counts in recorder.by_step_and_layer().values():
        assert torch.equal(counts, balanced)


def test_counting_reads_no_tensor_value():
    model = TinyModel()
    layer = moe_layers.find_moe_layers(model)[1]
    outputs = []
    layer.router.register_forward_hook(lambda module, args, output: outputs.append(output))
    with torch.no_grad():
        model(inputs(0))
    counts = layer.counts(tuple(tensor.to("meta") for tensor in outputs[0]))
    assert counts.device.type == "meta" and tuple(counts.shape) == (NUM_EXPERTS,)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
