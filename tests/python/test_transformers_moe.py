"""Expert load of real Hugging Face ``transformers`` MoE models, unmodified (tiny, CPU).

Runs under whichever transformers is first on the path: CTest runs it once with 5.x (the
system python) and once with 4.57 (``.cache/py-transformers4`` first on PYTHONPATH), and
:func:`test_module_layout_is_that_of_the_installed_version` proves which layout was seen.
"""

import sys

import pytest
import torch
import transformers

import tiny_models
from moescope.autocapture import expert_load_capture, moe_layers
from moescope.autocapture.moe_layers import MoeLayer

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])
FAMILIES = list(tiny_models.FAMILIES)
# 4.x blocks whose gate is an nn.Linear returning logits (the capture recomputes the top-k).
LINEAR_GATE_FAMILIES_4X = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"}


def train_steps(model, recorder, received, steps=3):
    """Trains ``steps`` steps; returns what the experts received, {(step, layer index): counts}."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    layer_of_path = {layer.path: layer.layer for layer in moe_layers.find_moe_layers(model)}
    truth = {}
    model.train()
    for step in range(steps):
        recorder.step = step
        input_ids = tiny_models.tokens(seed=step)
        model(input_ids, labels=input_ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        for path, counts in received.take().items():
            truth[(step, layer_of_path[path])] = counts
    return truth


@pytest.mark.parametrize("family", FAMILIES)
def test_finds_each_moe_layer_with_its_router(family):
    model = tiny_models.build(family)
    layers = moe_layers.find_moe_layers(model)
    assert [layer.layer for layer in layers] == tiny_models.FAMILIES[family][2]
    for layer in layers:
        assert layer.family == family
        assert (layer.num_experts, layer.top_k) == (tiny_models.NUM_EXPERTS, tiny_models.TOP_K)
        assert model.get_submodule(layer.path) is layer.block
        assert any(child is layer.router for child in layer.block.children())


@pytest.mark.parametrize("family", FAMILIES)
def test_module_layout_is_that_of_the_installed_version(family):
    model = tiny_models.build(family)
    for layer in moe_layers.find_moe_layers(model):
        if TRANSFORMERS_MAJOR == 4 and family in LINEAR_GATE_FAMILIES_4X:
            assert type(layer.router) is torch.nn.Linear
            assert isinstance(layer.block.experts, torch.nn.ModuleList)
        else:
            assert "Router" in type(layer.router).__name__
        if TRANSFORMERS_MAJOR >= 5:
            assert not isinstance(layer.block.experts, torch.nn.ModuleList)  # fused experts


@pytest.mark.parametrize("family", FAMILIES)
def test_counts_equal_tokens_the_experts_received(family, recorder):
    model = tiny_models.build(family)
    layers = moe_layers.find_moe_layers(model)
    received = tiny_models.ExpertsReceived({layer.path: layer.block for layer in layers})
    attached = expert_load_capture.attach(model, recorder.record, recorder.current_step)
    assert [layer.path for layer in attached] == [layer.path for layer in layers]

    truth = train_steps(model, recorder, received)
    expert_load_capture.flush()

    recorded = recorder.by_step_and_layer()
    assert sorted(recorded) == sorted(truth)
    num_assignments = tiny_models.tokens().numel() * tiny_models.TOP_K
    for key, counts in truth.items():
        assert counts.sum() == num_assignments
        assert torch.equal(recorded[key], counts), f"{family} step/layer {key}"
    # Training moved the routing: the steps are not all the same sample repeated.
    assert any(not torch.equal(recorded[(0, layer)], recorded[(2, layer)])
               for layer in tiny_models.FAMILIES[family][2])


@pytest.mark.parametrize("family", FAMILIES)
def test_counting_reads_no_tensor_value(family):
    """Counting on meta tensors (shapes without data) works only if no step reads a value
    (``.item()``, ``.tolist()``, ``bincount``, ``nonzero``, Python ``if tensor``), which is
    what would synchronize a CUDA device."""
    model = tiny_models.build(family).eval()
    layers = moe_layers.find_moe_layers(model)
    outputs = {}
    handles = [layer.router.register_forward_hook(
        lambda module, args, output, path=layer.path: outputs.__setitem__(path, output))
        for layer in layers]
    with torch.no_grad():
        model(tiny_models.tokens())
    for handle in handles:
        handle.remove()
    for layer in layers:
        on_meta = _to_meta(outputs[layer.path])
        counts = layer.counts(on_meta)
        assert counts.device.type == "meta"
        assert counts.dtype == torch.int64 and tuple(counts.shape) == (layer.num_experts,)


def _to_meta(output):
    if isinstance(output, torch.Tensor):
        return output.to("meta")
    return type(output)(_to_meta(item) for item in output)


@pytest.mark.parametrize("family", FAMILIES)
def test_router_biased_toward_one_expert_shows_on_its_layer_only(family, recorder):
    model = tiny_models.build(family).eval()
    layers = moe_layers.find_moe_layers(model)
    biased, other = layers[-1], layers[0]
    favoured_expert = 3
    tiny_models.bias_router_toward(model, [layer.router for layer in layers], biased.router,
                                   favoured_expert)
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    with torch.no_grad():
        model(tiny_models.tokens())
    recorded = recorder.by_step_and_layer()
    num_tokens = tiny_models.tokens().numel()
    biased_counts = recorded[(0, biased.layer)]
    assert biased_counts[favoured_expert] == num_tokens  # every token chose it
    assert int(biased_counts.argmax()) == favoured_expert
    assert recorded[(0, other.layer)][favoured_expert] < num_tokens


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_leaves_outputs_unchanged(family, recorder):
    model = tiny_models.build(family).eval()
    input_ids = tiny_models.tokens()
    with torch.no_grad():
        plain = model(input_ids).logits
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    with torch.no_grad():
        captured = model(input_ids).logits
    assert recorder.samples
    assert torch.equal(plain, captured)


def test_model_without_moe_has_no_layers_and_no_hooks(recorder):
    model = tiny_models.plain_llama()
    assert moe_layers.find_moe_layers(model) == []
    assert expert_load_capture.attach(model, recorder.record, recorder.current_step) == []
    assert all(not module._forward_hooks for module in model.modules())
    model(tiny_models.tokens())
    assert recorder.samples == []


class RaisingAdapter:
    """Matches Mixtral blocks like the built-in adapter, but its counting always fails."""

    def match(self, name, module):
        if type(module).__name__ != "MixtralSparseMoeBlock":
            return None

        def count_tokens(router_output):
            raise RuntimeError("this adapter does not understand the router")
        return MoeLayer(path=name, layer=-1, block=module, router=module.gate,
                        num_experts=tiny_models.NUM_EXPERTS, top_k=tiny_models.TOP_K,
                        family="raising-test-adapter", count_tokens=count_tokens)


def test_failing_adapter_is_detached_with_one_warning(recorder, capsys):
    model = tiny_models.build("mixtral").eval()
    input_ids = tiny_models.tokens()
    with torch.no_grad():
        plain = model(input_ids).logits
    adapter = RaisingAdapter()
    moe_layers.register_adapter(adapter, first=True)
    try:
        layers = expert_load_capture.attach(model, recorder.record, recorder.current_step)
    finally:
        moe_layers.unregister_adapter(adapter)
    assert [layer.family for layer in layers] == ["raising-test-adapter"] * 2
    capsys.readouterr()
    with torch.no_grad():
        first = model(input_ids).logits
        second = model(input_ids).logits
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warnings) == 1 and warnings[0].startswith("moescope: "), warnings
    assert "raising-test-adapter" in warnings[0]
    assert torch.equal(first, plain) and torch.equal(second, plain)
    assert all(not layer.router._forward_hooks for layer in layers)
    assert recorder.samples == []


def test_adapter_that_raises_in_match_is_skipped_with_one_warning(capsys):
    class BrokenMatch:
        def match(self, name, module):
            raise ValueError("broken")
    adapter = BrokenMatch()
    moe_layers.register_adapter(adapter, first=True)
    try:
        layers = moe_layers.find_moe_layers(tiny_models.build("qwen3_moe"))
    finally:
        moe_layers.unregister_adapter(adapter)
    assert [layer.family for layer in layers] == ["qwen3_moe", "qwen3_moe"]
    err = capsys.readouterr().err
    assert err.count("moescope: ") == 1 and "BrokenMatch" in err


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_activation_checkpointing_recompute_is_not_counted_twice(use_reentrant, recorder):
    model = tiny_models.build("qwen3_moe")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={
        "use_reentrant": use_reentrant})
    layers = moe_layers.find_moe_layers(model)
    received = tiny_models.ExpertsReceived({layer.path: layer.block for layer in layers})
    expert_load_capture.attach(model, recorder.record, recorder.current_step)
    model.train()
    input_ids = tiny_models.tokens()
    model(input_ids, labels=input_ids).loss.backward()
    recorded = recorder.by_step_and_layer()  # fails if a layer was recorded twice
    assert sorted(recorded) == [(0, layer.layer) for layer in layers]
    truth = received.take()  # the recompute ran the experts again: twice the tokens
    for layer in layers:
        assert torch.equal(2 * recorded[(0, layer.layer)], truth[layer.path])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
