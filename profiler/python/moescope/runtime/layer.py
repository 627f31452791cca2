"""MoELayer: moescope::runtime::MoELayer as a torch.nn.Module.

The C++ layer keeps what is not a tensor (config, expert placement, expert-parallel group, bias
bookkeeping, trace statistics); the module owns every tensor as an ordinary nn.Parameter or
buffer, so optimizers, state_dict, .to() and hooks see them as for any module. Each forward
passes the module's current tensors to the C++ layer (torch.ops.moescope.moe_layer_forward), whose
autograd graph ends in those Parameters.
"""

import dataclasses
from typing import List, NamedTuple, Optional

import torch
from torch import nn

from . import _library


@dataclasses.dataclass
class MoEConfig:
    """Every option of moescope::runtime::MoEConfig (runtime/include/moescope/runtime/
    moe_config.h, docs/runtime.md) with its C++ default; tests/python_runtime checks the names
    and defaults against the C++ side (torch.ops.moescope.moe_config_text). Enums by name: score_function "softmax" | "sigmoid",
    drop_policy "by_probability" | "by_position", receive_cap_policy "drop_lowest_probability" |
    "drop_latest_position" | "fail", nonfinite_policy "error" | "dont_check"."""

    hidden_size: int = 0
    ffn_hidden_size: int = 0
    num_experts: int = 0
    top_k: int = 2
    score_function: str = "softmax"
    normalize_top_k_weights: bool = False
    routed_scaling_factor: float = 1.0
    num_groups: int = 1
    group_top_k: int = 1
    nonfinite_policy: str = "error"
    aux_loss_coeff: float = 0.0
    seq_aux_loss_coeff: float = 0.0
    z_loss_coeff: float = 0.0
    enable_expert_bias: bool = False
    expert_bias_update_rate: float = 1e-3
    gate_logit_skew: List[float] = dataclasses.field(default_factory=list)
    force_uniform_routing: bool = False
    capacity_factor: float = 0.0
    drop_policy: str = "by_probability"
    num_redundant_experts: int = 0
    receive_cap_rows: int = 0
    receive_cap_policy: str = "drop_lowest_probability"
    use_dispatch_buffer_pool: bool = False
    dispatch_buffer_headroom: float = 1.25
    num_shared_experts: int = 0
    shared_ffn_hidden_size: int = 0
    use_fused_kernels: bool = True
    recompute_expert_activation: bool = False
    layer_index: int = 0
    init_std: float = 0.02

    def to_text(self) -> str:
        """`field=value` lines, what the C++ side parses (moe_config_text.h)."""
        lines = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "gate_logit_skew":
                value = ",".join(repr(float(v)) for v in value)
            elif isinstance(value, bool):
                value = int(value)
            elif isinstance(value, float):
                value = repr(value)
            lines.append(f"{field.name}={value}")
        return "\n".join(lines) + "\n"


class MoEOutput(NamedTuple):
    output: torch.Tensor             # same shape and dtype as the input
    aux_loss: torch.Tensor           # 0-dim: the enabled balancing losses (add it to the loss)
    tokens_per_expert: torch.Tensor  # [E] int64, this rank, before capacity drops
    num_dropped: int                 # assignments the capacity limit dropped
    num_received_rows: int           # token copies this rank's experts computed


@torch.compiler.disable
def _run_layer(layer, hidden, tensors, training):
    # A graph break under torch.compile: the op takes a TorchScript class object, which dynamo
    # cannot trace; the rest of a compiled model is still compiled.
    return torch.ops.moescope.moe_layer_forward(layer, hidden, tensors, training)


def set_training_step(step: int) -> None:
    """Marks the start of a training step in the trace (what ExpertBalancer.step() also does):
    the runtime's per-layer records carry it, and the program numbering its steps turns off the
    zero-code capture's own step markers (as moescope.step() does), so steps are not doubled."""
    _library.load()
    import moescope
    moescope._current_step = int(step)
    moescope._user_numbers_steps[0] = True
    torch.ops.moescope.set_training_step(int(step))


class MoELayer(nn.Module):
    """A mixture-of-experts FFN: router, capacity, grouped SwiGLU experts, expert parallelism.

    hidden [T, H] or [B, S, H] -> MoEOutput. With a `process_group` (torch.distributed, Gloo on
    CPU / NCCL with backend_device="cuda") the experts are spread over its ranks: every rank
    builds the layer with the same config together and calls forward together.

    Parameters: gate_weight [E, H] (fp32), w_gate_up [S_local, H, 2F] (columns [0, F) gate,
    [F, 2F) up), w_down [S_local, F, H], and with shared experts shared_w_gate_up [1, H, 2F_s],
    shared_w_down [1, F_s, H]. S_local = (E + num_redundant_experts) / ep_size expert slots.
    Buffers: expert_bias [E], logit_skew [E], accumulated_load [E] (not saved).
    """

    def __init__(self, config: MoEConfig, process_group=None, backend_device: str = "cpu"):
        super().__init__()
        _library.load()
        self.config = dataclasses.replace(config)
        boxed_group = process_group.boxed() if process_group is not None else None
        self._layer = torch.classes.moescope.MoELayer(self.config.to_text(), boxed_group,
                                                      backend_device)
        self._parameter_names = list(self._layer.parameter_names())
        self._buffer_names = list(self._layer.buffer_names())
        tensors = list(self._layer.tensors())
        for name, tensor in zip(self._parameter_names, tensors):
            # Shares the C++ layer's storage; bind() below makes the C++ layer use this tensor.
            self.register_parameter(name, nn.Parameter(tensor.detach()))
        for name, tensor in zip(self._buffer_names, tensors[len(self._parameter_names):]):
            self.register_buffer(name, tensor, persistent=name != "accumulated_load")
        self._layer.bind(self._tensors())
        self.last_output: Optional[MoEOutput] = None

    def _tensors(self):
        return [getattr(self, name) for name in self._parameter_names + self._buffer_names]

    def forward(self, hidden: torch.Tensor) -> MoEOutput:
        output, aux_loss, tokens, dropped, received = _run_layer(
            self._layer, hidden, self._tensors(), self.training)
        self.last_output = MoEOutput(output, aux_loss, tokens, int(dropped), int(received))
        return self.last_output

    # ---- expert parallelism and balancing (every rank calls these together) ------------------
    def load_full_expert_weights(self, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> None:
        """Copies this rank's slots out of full weights w_gate_up [E, H, 2F], w_down [E, F, H]."""
        self._layer.bind(self._tensors())
        self._layer.load_full_expert_weights(w_gate_up, w_down)

    def update_expert_bias(self) -> None:
        """Aux-loss-free step: bias += rate * sign(mean - load), load summed over the group."""
        self._layer.bind(self._tensors())
        self._layer.update_expert_bias()

    def sync_replica_gradients(self) -> None:
        """Sums the gradients of each replicated expert over its replicas (before the step)."""
        self._layer.bind(self._tensors())
        self._layer.sync_replica_gradients()

    @property
    def rank(self) -> int:
        return int(self._layer.rank())

    @property
    def group_size(self) -> int:
        return int(self._layer.group_size())

    def local_slot_experts(self) -> List[int]:
        """The logical expert in each of this rank's slots."""
        return list(self._layer.local_slot_experts())

    def physical_to_logical(self) -> List[int]:
        """The logical expert in every slot of the group (the placement)."""
        return list(self._layer.physical_to_logical())

    def drain_trace_statistics(self) -> None:
        """Writes the statistics still queued (before stopping an in-process recorder)."""
        self._layer.drain_trace_statistics()

    def extra_repr(self) -> str:
        return str(self._layer.describe_config()) + f", ep_size={self.group_size}"
