"""moescope.runtime.MoELayer from Python: ordinary nn.Parameters, forward and autograd against a
plain PyTorch computation of the same layer, module plumbing (state_dict, .double(), optimizer),
clear errors, and the trace it writes under an in-process recorder."""

import copy
import dataclasses
import inspect

import pytest
import torch
import torch.nn.functional as F

from moescope.runtime import MoEConfig, MoELayer


def reference_forward(layer, hidden):
    """The layer in plain PyTorch ops: softmax/sigmoid router, top-k, optional renormalisation,
    SwiGLU experts, shared experts. hidden [T, H] -> [T, H]."""
    config = layer.config
    logits = hidden.to(layer.gate_weight.dtype) @ layer.gate_weight.t()
    scores = logits.softmax(-1) if config.score_function == "softmax" else logits.sigmoid()
    weights, experts = scores.topk(config.top_k, dim=-1)
    if config.normalize_top_k_weights:
        weights = weights / weights.sum(-1, keepdim=True)
    weights = weights * config.routed_scaling_factor
    gate_up = torch.einsum("th,tkhf->tkf", hidden, layer.w_gate_up[experts])
    gate, up = gate_up.chunk(2, dim=-1)
    expert_out = torch.einsum("tkf,tkfh->tkh", F.silu(gate) * up, layer.w_down[experts])
    out = (expert_out * weights.unsqueeze(-1).to(expert_out.dtype)).sum(1)
    if config.num_shared_experts:
        gate, up = (hidden @ layer.shared_w_gate_up[0]).chunk(2, dim=-1)
        out = out + (F.silu(gate) * up) @ layer.shared_w_down[0]
    return out


def small_config(**overrides):
    return MoEConfig(**{**dict(hidden_size=16, ffn_hidden_size=24, num_experts=6, top_k=2,
                               init_std=0.2), **overrides})


def test_parameters_are_ordinary_parameters_the_optimizer_sees():
    layer = MoELayer(small_config(num_shared_experts=1))
    names = [name for name, _ in layer.named_parameters()]
    assert names == ["gate_weight", "w_gate_up", "w_down", "shared_w_gate_up", "shared_w_down"]
    for parameter in layer.parameters():
        assert type(parameter) is torch.nn.Parameter and parameter.requires_grad
    assert layer.w_gate_up.shape == (6, 16, 48) and layer.w_down.shape == (6, 24, 16)
    assert set(layer.state_dict()) == set(names) | {"expert_bias", "logit_skew"}
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = copy.deepcopy(layer.state_dict())
    layer(torch.randn(10, 16)).output.square().sum().backward()
    optimizer.step()
    for name in names:  # the C++ forward's gradients reached the Python parameters
        assert layer.get_parameter(name).grad is not None, name
        assert not torch.equal(before[name], layer.state_dict()[name]), name


@pytest.mark.parametrize("overrides", [
    dict(),
    dict(normalize_top_k_weights=True),
    dict(score_function="sigmoid", normalize_top_k_weights=True, routed_scaling_factor=2.0),
    dict(num_shared_experts=1, shared_ffn_hidden_size=8),
], ids=["softmax", "softmax-normalized", "sigmoid-scaled", "shared-experts"])
def test_forward_and_gradients_match_plain_pytorch(overrides):
    torch.manual_seed(0)
    layer = MoELayer(small_config(**overrides)).double()
    hidden = torch.randn(2, 9, 16, dtype=torch.float64, requires_grad=True)
    out = layer(hidden)
    assert out.output.shape == hidden.shape and out.output.dtype == torch.float64
    assert int(out.tokens_per_expert.sum()) == 18 * 2 and out.num_dropped == 0
    expected = reference_forward(layer, hidden.view(-1, 16)).view_as(hidden)
    torch.testing.assert_close(out.output, expected, rtol=1e-10, atol=1e-12)
    upstream = torch.randn_like(expected)
    grads = torch.autograd.grad(out.output, [hidden] + list(layer.parameters()), upstream)
    reference_grads = torch.autograd.grad(expected, [hidden] + list(layer.parameters()), upstream)
    for got, want in zip(grads, reference_grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_gradcheck_in_float64():
    torch.manual_seed(1)
    layer = MoELayer(small_config(hidden_size=4, ffn_hidden_size=3, num_experts=3)).double()
    hidden = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: layer(x).output, (hidden,))


def test_module_to_and_load_state_dict_keep_one_tensor_per_parameter():
    torch.manual_seed(2)
    source, target = MoELayer(small_config()), MoELayer(small_config())
    target.load_state_dict(source.state_dict())
    hidden = torch.randn(7, 16)
    torch.testing.assert_close(target(hidden).output, source(hidden).output, rtol=0, atol=0)
    # assign=True replaces the Parameter objects: the next forward must use the new ones.
    target.load_state_dict({k: v * 2 for k, v in source.state_dict().items()}, assign=True)
    target(hidden).output.sum().backward()
    assert target.w_down.grad is not None


def test_aux_loss_and_expert_bias_update():
    layer = MoELayer(small_config(aux_loss_coeff=0.01, z_loss_coeff=0.001, enable_expert_bias=True,
                                  gate_logit_skew=[3.0, 0, 0, 0, 0, 0]))
    out = layer(torch.randn(32, 16))
    assert out.aux_loss.dim() == 0 and float(out.aux_loss) > 0 and out.aux_loss.requires_grad
    assert int(out.tokens_per_expert[0]) > 16  # the skew sends most tokens to expert 0
    layer.update_expert_bias()
    assert float(layer.expert_bias[0]) < 0 < float(layer.expert_bias[1:].max())


def test_bad_config_and_input_fail_with_the_field_named():
    with pytest.raises(RuntimeError, match="top_k"):
        MoELayer(small_config(top_k=7))
    with pytest.raises(RuntimeError, match="no field 'hidden'"):
        from moescope.runtime import _library
        torch.classes.moescope.MoELayer("hidden=3\n", None, "cpu")
    layer = MoELayer(small_config())
    with pytest.raises(RuntimeError, match="hidden size 15 does not match"):
        layer(torch.randn(4, 15))
    with pytest.raises(RuntimeError, match="w_down must keep its shape"):
        layer.w_down = torch.nn.Parameter(torch.zeros(1, 2, 3))
        layer(torch.randn(4, 16))


def cpp_config_text(text):
    """The C++ side's reading of a config text, every field written back, as {field: str}."""
    from moescope.runtime import _library
    _library.load()
    lines = torch.ops.moescope.moe_config_text(text).splitlines()
    return dict(line.split("=", 1) for line in lines)


def as_python_values(fields):
    """{field: str} of that text in the Python MoEConfig's types."""
    def value(name, text):
        default = getattr(MoEConfig(), name)
        if isinstance(default, list):
            return [float(v) for v in text.split(",")] if text else []
        if isinstance(default, bool):
            return text == "1"
        return type(default)(text)
    return {name: value(name, text) for name, text in fields.items()}


def test_python_config_declares_the_cpp_fields_with_the_cpp_defaults():
    # The Python MoEConfig is a second declaration of moe_config.h's fields, for Python users
    # and their editors; every layer built from Python takes its defaults, not C++'s.
    cpp_fields = cpp_config_text("")
    python_defaults = dataclasses.asdict(MoEConfig())
    assert sorted(cpp_fields) == sorted(python_defaults)
    cpp_defaults = as_python_values(cpp_fields)
    differing = {name: (cpp_defaults[name], python_defaults[name]) for name in cpp_defaults
                 if cpp_defaults[name] != python_defaults[name]}
    assert differing == {}, "(C++ default, Python default) by field"


def test_every_config_field_reaches_the_cpp_layer():
    config = MoEConfig(hidden_size=8, ffn_hidden_size=12, num_experts=4, top_k=1,
                       score_function="sigmoid", normalize_top_k_weights=True,
                       routed_scaling_factor=2.5, num_groups=2, group_top_k=2,
                       nonfinite_policy="dont_check", aux_loss_coeff=0.01,
                       seq_aux_loss_coeff=0.02, z_loss_coeff=0.003, enable_expert_bias=True,
                       expert_bias_update_rate=0.004, gate_logit_skew=[1.5, 0.25, 0.0, -1.0],
                       force_uniform_routing=True, capacity_factor=1.25,
                       drop_policy="by_position", num_redundant_experts=2, receive_cap_rows=7,
                       receive_cap_policy="fail", use_dispatch_buffer_pool=True,
                       dispatch_buffer_headroom=1.5, num_shared_experts=1,
                       shared_ffn_hidden_size=6, use_fused_kernels=False,
                       recompute_expert_activation=True, layer_index=3, init_std=0.05)
    assert all(getattr(config, field.name) != field.default for field in
               dataclasses.fields(config) if field.default is not dataclasses.MISSING)
    assert as_python_values(cpp_config_text(config.to_text())) == dataclasses.asdict(config)


def test_expert_balancer_defaults_are_the_cpp_rebalancers():
    # ExpertBalancer sends every option, so its keyword defaults, not C++'s, decide a Python run.
    from moescope.runtime import ExpertBalancer, _library
    _library.load()
    cpp = dict(torch.ops.moescope.rebalancer_option_defaults())
    python = inspect.signature(ExpertBalancer.__init__).parameters
    for name in ("interval_steps", "warmup_steps", "imbalance_threshold",
                 "transfer_bytes_per_second", "incremental_max_over_mean", "ema_alpha",
                 "window_steps"):
        assert float(python[name].default) == cpp[name], name
    assert (python["rule"].default == "imbalance") == bool(cpp["imbalance_rule"])
    assert python["plan_for_next_window"].default == bool(cpp["plan_for_next_window"])
    # Set on purpose: the Python loop packs the replicas' gradients into its one all-reduce.
    assert cpp["replica_gradients_packed"] == 0.0
    # Every option ExpertBalancer sends is one the C++ side takes (else its constructor fails).
    balancer = ExpertBalancer(torch.nn.Sequential(MoELayer(small_config())), mark_steps=False)
    assert balancer.layers
    with pytest.raises(RuntimeError, match="unknown option 'interval'"):
        torch.classes.moescope.ExpertRebalancer({"interval": 5.0})


def test_torch_compile_runs_the_layer_through_a_graph_break():
    torch.manual_seed(3)
    layer = MoELayer(small_config())
    model = torch.nn.Sequential(torch.nn.Linear(16, 16))
    hidden = torch.randn(6, 16)

    def step(x):
        return layer(model(x).relu()).output * 2

    compiled = torch.compile(step, backend="eager")
    torch.testing.assert_close(compiled(hidden), step(hidden), rtol=1e-6, atol=1e-6)
