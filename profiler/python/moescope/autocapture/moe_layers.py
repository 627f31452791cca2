"""Finds the MoE layers of an unmodified model and counts tokens per expert from its router.

:func:`find_moe_layers` walks ``model.named_modules()`` and asks each registered adapter
whether a module is an MoE block it knows. An adapter answers with a :class:`MoeLayer`: the
block, the module whose forward output carries the routing (the *router*), and how to turn that
output into tokens per expert. Built in (docs/autocapture-adapters.md says how each one works):

- Hugging Face ``transformers`` Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V3, OLMoE and GPT-OSS,
  in both module layouts: 4.x (an ``nn.Linear`` gate returning logits, or a router module
  returning the selected indices) and 5.x (router modules returning
  ``(logits, scores, indices)``);
- torchtitan's ``MoE`` (its ``TokenChoiceTopKRouter`` returns the selected expert ids);
- Megatron-Core's ``MoELayer`` (its ``TopKRouter`` returns ``(probs, routing_map)``).

Counting never synchronizes a CUDA device: no ``.item()``, ``.cpu()``, ``.tolist()``, no
``bincount`` (which reads the maximum on the host) and no Python branch on tensor values; the
result stays on the router's device as an int64 tensor ``[num_experts]``.

This module imports only torch: adapters recognise modules by class name and defining module,
so nothing of ``transformers``, torchtitan or Megatron is imported here.
"""

import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

import torch

__all__ = [
    "MoeLayer", "MoeAdapter", "TransformersAdapter", "TorchtitanAdapter", "MegatronAdapter",
    "find_moe_layers", "register_adapter", "unregister_adapter",
    "registered_adapters",
    "tokens_per_expert_from_indices", "tokens_per_expert_from_routing_map",
    "tokens_per_expert_from_softmax_topk", "selected_expert_indices", "decoder_layer_index",
    "warn_once",
]

_warned = set()


def warn_once(key, text):
    """Writes ``moescope: text`` on stderr the first time ``key`` is seen in this process."""
    if key in _warned:
        return
    _warned.add(key)
    try:
        sys.stderr.write(f"moescope: {text}\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the program
        pass


@dataclass
class MoeLayer:
    """One MoE layer of a model and how to read its expert load.

    ``count_tokens`` maps the router's forward output to ``counts``: int64 ``[num_experts]``,
    the number of (token, expert) assignments per expert in that forward call, on the device of
    the output. ``sum(counts) == num_tokens * top_k`` unless the router dropped tokens.
    """

    path: str                 # module path of the block, e.g. "model.layers.3.mlp"
    layer: int                # decoder layer number from the path (3 above)
    block: torch.nn.Module    # the MoE block
    router: torch.nn.Module   # the module whose forward output carries the routing
    num_experts: int
    top_k: int
    family: str               # e.g. "mixtral", "torchtitan"
    count_tokens: Callable[[object], torch.Tensor] = field(repr=False)

    def counts(self, router_output):
        """Tokens per expert, int64 ``[num_experts]`` on the router output's device."""
        return self.count_tokens(router_output)


@runtime_checkable
class MoeAdapter(Protocol):
    """Recognises one kind of MoE block.

    ``match`` is called for every ``(path, module)`` of ``model.named_modules()`` (outer modules
    first) and returns a :class:`MoeLayer` for a block it knows, else None. It must not run the
    module or touch tensor values. ``layer=-1`` lets :func:`find_moe_layers` number the layer.
    """

    def match(self, name: str, module: torch.nn.Module) -> "MoeLayer | None":
        ...


# ---- counting, shared by the adapters (and usable by user adapters) ----------------------------

def _local(tensor):
    """The local shard of a DTensor (the tokens this rank routed), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def tokens_per_expert_from_indices(indices, num_experts):
    """Counts selected expert ids.

    indices: integer tensor of any shape, typically ``[num_tokens, top_k]``; ids outside
    ``[0, num_experts)`` (padding or dropped slots some routers use) are not counted.
    Returns int64 ``[num_experts]`` on ``indices.device``, without a host synchronization
    (``scatter_add_`` into a zeroed tensor with one spare slot for the out-of-range ids).
    """
    flat = _local(indices).detach().reshape(-1).to(torch.int64)
    in_range = (flat >= 0) & (flat < num_experts)
    slots = torch.where(in_range, flat, num_experts)
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, slots, torch.ones_like(slots))
    return counts[:num_experts]


def tokens_per_expert_from_routing_map(routing_map):
    """Counts a boolean (or 0/1) routing map ``[num_tokens, num_experts]`` per expert.

    Returns int64 ``[num_experts]`` on the map's device.
    """
    routing_map = _local(routing_map).detach()
    return routing_map.reshape(-1, routing_map.shape[-1]).sum(dim=0, dtype=torch.int64)


def tokens_per_expert_from_softmax_topk(logits, num_experts, top_k):
    """Recomputes the selection of a softmax-then-top-k router from its logits.

    logits: ``[num_tokens, num_experts]`` (any leading shape). The same operations as the
    transformers 4.x blocks (``softmax(logits, dim=1, dtype=float)`` then ``topk(top_k)``), so
    the experts are exactly those the block selected from the same logits. Costs a temporary
    ``[num_tokens, num_experts]`` float32 tensor. Returns int64 ``[num_experts]``.
    """
    logits = _local(logits).detach().reshape(-1, num_experts)
    probabilities = torch.nn.functional.softmax(logits, dim=1, dtype=torch.float)
    _, indices = torch.topk(probabilities, top_k, dim=-1)
    return tokens_per_expert_from_indices(indices, num_experts)


def tensors_in(output):
    """The tensors of a module's output: the output itself, or the tensors of a tuple/list."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [item for item in output if isinstance(item, torch.Tensor)]
    return []


def selected_expert_indices(output):
    """The first integer tensor of a router's output (the selected expert ids).

    Works across layouts whose other outputs are floating point: transformers 5.x
    ``(logits, scores, indices)``, DeepSeek-V3 4.x ``(indices, weights)``, GPT-OSS 4.x
    ``(scores, indices)``, torchtitan ``(scores, expert_ids, ...)``. Checks dtypes only.
    """
    for tensor in tensors_in(output):
        if not tensor.is_floating_point() and tensor.dtype != torch.bool:
            return tensor
    raise TypeError(f"router output has no integer tensor of expert indices "
                    f"(got {_describe(output)})")


def _routing_map_in(output):
    for tensor in tensors_in(output):
        if tensor.dtype == torch.bool:
            return tensor
    raise TypeError(f"router output has no boolean routing map (got {_describe(output)})")


def _describe(output):
    if isinstance(output, torch.Tensor):
        return f"tensor {output.dtype} {tuple(output.shape)}"
    if isinstance(output, (tuple, list)):
        return "(" + ", ".join(_describe(item) for item in output) + ")"
    return type(output).__name__


_NUMBERED_COMPONENT = re.compile(r"^\d+$")


def decoder_layer_index(path):
    """The last numeric component of a module path (``model.layers.3.mlp`` -> 3), else -1."""
    for component in reversed(path.split(".")):
        if _NUMBERED_COMPONENT.match(component):
            return int(component)
    return -1


def _first_int_attribute(modules, names):
    for module in modules:
        for name in names:
            value = getattr(module, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _router_of(module, class_names, package, router_attribute):
    """The router submodule of ``module`` when its class is one of ``class_names`` defined in
    ``package`` (recognised without importing the package), else None."""
    if type(module).__name__ not in class_names:
        return None
    if type(module).__module__.split(".")[0] != package:
        return None
    router = getattr(module, router_attribute, None)
    return router if isinstance(router, torch.nn.Module) else None


def _router_and_sizes(module, class_names, package, top_k_attribute):
    """``(router, num_experts, top_k)`` of a block whose ``router`` submodule holds the expert
    count (``num_experts``, else on the block) and the top-k (``top_k_attribute``), else None:
    how torchtitan's and Megatron's blocks are recognised."""
    router = _router_of(module, class_names, package, "router")
    if router is None:
        return None
    num_experts = _first_int_attribute((router, module), ("num_experts",))
    top_k = _first_int_attribute((router,), (top_k_attribute,))
    if num_experts is None or top_k is None:
        return None
    return router, num_experts, top_k


def _counting_selected_indices(num_experts):
    def count_tokens(output):
        return tokens_per_expert_from_indices(selected_expert_indices(output), num_experts)
    return count_tokens


# ---- built-in adapters --------------------------------------------------------------------------

class TransformersAdapter:
    """Hugging Face ``transformers`` MoE blocks, 4.x and 5.x layouts.

    4.x Mixtral/Qwen2-MoE/Qwen3-MoE/OLMoE: the block's ``gate`` is an ``nn.Linear`` returning
    logits ``[num_tokens, num_experts]``; the block takes softmax then top-k, recomputed here.
    Every other layout (4.x DeepSeek-V3 and GPT-OSS, all of 5.x): the router module returns the
    selected indices ``[num_tokens, top_k]``, which are counted as they are.
    """

    def __init__(self, family, block_class_names, router_attribute="gate"):
        self.family = family
        self.block_class_names = frozenset(block_class_names)
        self.router_attribute = router_attribute

    def match(self, name, module):
        router = _router_of(module, self.block_class_names, "transformers", self.router_attribute)
        if router is None:
            return None
        num_experts = _first_int_attribute(
            (router, module), ("num_experts", "n_routed_experts", "num_local_experts"))
        if num_experts is None and isinstance(router, torch.nn.Linear):
            num_experts = router.out_features
        top_k = _first_int_attribute((router, module), ("top_k", "num_experts_per_tok"))
        if num_experts is None or top_k is None:
            return None
        if isinstance(router, torch.nn.Linear):
            def count_tokens(logits):
                return tokens_per_expert_from_softmax_topk(logits, num_experts, top_k)
        else:
            count_tokens = _counting_selected_indices(num_experts)
        return MoeLayer(path=name, layer=decoder_layer_index(name), block=module, router=router,
                        num_experts=num_experts, top_k=top_k, family=self.family,
                        count_tokens=count_tokens)


class _RouterBlockAdapter:
    """A block whose ``router`` submodule holds the expert count and the top-k (see
    :func:`_router_and_sizes`); each framework names its block and says how its layer number
    and its router's output are read."""

    family = None
    block_class_names = ()
    package = None
    top_k_attribute = None

    def match(self, name, module):
        found = _router_and_sizes(module, self.block_class_names, self.package,
                                  self.top_k_attribute)
        if found is None:
            return None
        router, num_experts, top_k = found
        return MoeLayer(path=name, layer=self.layer_of(name, router), block=module, router=router,
                        num_experts=num_experts, top_k=top_k, family=self.family,
                        count_tokens=self.token_counter(num_experts))

    def layer_of(self, name, router):
        return decoder_layer_index(name)


class TorchtitanAdapter(_RouterBlockAdapter):
    """torchtitan's ``MoE``: its ``router`` (``TokenChoiceTopKRouter``) returns
    ``(top_scores [B, L, K], expert_ids [B, L, K], ...)``; the integer tensor is counted, so
    group-limited routing, the load-balancing ``expert_bias`` and the debug round-robin routing
    are all seen as the block saw them."""

    family = "torchtitan"
    block_class_names = ("MoE",)
    package = "torchtitan"
    top_k_attribute = "top_k"

    def token_counter(self, num_experts):
        return _counting_selected_indices(num_experts)


class MegatronAdapter(_RouterBlockAdapter):
    """Megatron-Core's ``MoELayer``: its ``router`` (``TopKRouter``) returns
    ``(probs [num_tokens, num_experts], routing_map [num_tokens, num_experts] bool)``, after
    token dropping, so the count is the tokens each expert really receives. The layer number is
    the router's global ``layer_number`` (1-based, set by Megatron) minus one when it has one,
    so pipeline stages agree. Untested on a real run: Megatron's router moves its weight to CUDA
    in forward, so it only runs on a GPU (docs/autocapture-adapters.md)."""

    family = "megatron"
    block_class_names = ("MoELayer",)
    package = "megatron"
    top_k_attribute = "topk"

    def layer_of(self, name, router):
        layer_number = getattr(router, "layer_number", None)
        return (layer_number - 1 if isinstance(layer_number, int) and layer_number > 0
                else decoder_layer_index(name))

    def token_counter(self, num_experts):
        def count_tokens(output):
            return tokens_per_expert_from_routing_map(_routing_map_in(output))
        return count_tokens


_adapters = [
    TransformersAdapter("mixtral", ["MixtralSparseMoeBlock"]),
    TransformersAdapter("qwen2_moe", ["Qwen2MoeSparseMoeBlock"]),
    TransformersAdapter("qwen3_moe", ["Qwen3MoeSparseMoeBlock"]),
    TransformersAdapter("deepseek_v3", ["DeepseekV3MoE"]),
    TransformersAdapter("olmoe", ["OlmoeSparseMoeBlock"]),
    TransformersAdapter("gpt_oss", ["GptOssMLP"], router_attribute="router"),
    TorchtitanAdapter(),
    MegatronAdapter(),
]


def register_adapter(adapter, first=False):
    """Adds an adapter; ``first=True`` puts it before the built-in ones (it wins a tie)."""
    if not callable(getattr(adapter, "match", None)):
        raise TypeError(f"{type(adapter).__name__} has no match(name, module) method")
    if first:
        _adapters.insert(0, adapter)
    else:
        _adapters.append(adapter)


def unregister_adapter(adapter):
    """Removes an adapter added by :func:`register_adapter` (or a built-in one)."""
    _adapters.remove(adapter)


def registered_adapters():
    """The adapters in the order :func:`find_moe_layers` asks them."""
    return list(_adapters)


def find_moe_layers(model):
    """The MoE layers of ``model`` in module order.

    The first adapter that matches a module wins; modules inside a matched block are not asked
    again. An adapter whose ``match`` raises is skipped for the rest of the walk, with one
    warning on stderr. A layer without a number in its path gets its position among the MoE
    layers found.
    """
    layers = []
    broken = set()
    matched_prefixes = []
    for name, module in model.named_modules():
        if any(name.startswith(prefix) for prefix in matched_prefixes):
            continue
        for adapter in _adapters:
            if id(adapter) in broken:
                continue
            try:
                layer = adapter.match(name, module)
            except Exception as error:  # noqa: BLE001 - a broken adapter must not stop the walk
                broken.add(id(adapter))
                warn_once(("match", type(adapter).__name__),
                          f"MoE adapter {type(adapter).__name__} failed on {name or 'the model'}"
                          f" ({type(error).__name__}: {error}); it is skipped")
                continue
            if layer is not None:
                layers.append(layer)
                matched_prefixes.append(name + "." if name else "")
                break
    for position, layer in enumerate(layers):
        if layer.layer < 0:
            layer.layer = position
    return layers
