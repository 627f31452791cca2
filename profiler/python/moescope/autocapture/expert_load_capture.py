"""Expert load of every MoE layer of an unmodified model, from forward hooks on its routers.

:func:`attach` finds the MoE layers (``moe_layers.find_moe_layers``) and registers a local
forward hook on each router. At each router forward the hook counts tokens per expert on the
router's device and hands ``record(step, layer, counts)`` a host int64 tensor
``[num_experts]``, where ``step`` is ``current_step()`` at that forward.

On CUDA nothing waits for the device: the counts travel through ``moescope.host_copies``
(pinned buffer, non-blocking copy, an event polled at every later router forward, waited for
only by :func:`flush` at the end of the run), so a step's counts are usually recorded during the
next step. On the CPU they are handed over at once.

A hook never changes the router's output, keeps no reference to activations, and allocates on
the device only the counts (and, for a 4.x logits gate, the recomputed top-k). Any exception
in a hook (adapter, ``current_step``, ``record``) is caught: one warning on stderr prefixed
``moescope: `` per adapter family, and that layer's hook is removed; the program runs on.

Inside ``torch.compile`` regions the hook runs while Dynamo traces the model: it then only
puts one call of the custom operator ``moescope::expert_load`` into the graph (registered with
``torch.library``, an ordered side effect, so no compiler pass drops or reorders it). The
compiled program calls that operator at every router forward, and its implementation counts
and records exactly as the eager hook does: no graph break, no recompile, the same graphs as
without moescope. The hook checks for compilation before anything else, so Dynamo never traces
a line of it that could break a graph.

Counting runs with the thread's RecordFunction off while a torch.profiler is on, so the
program's own profiler trace does not show moescope's counting operators.

Not counted (said in the trace): forwards captured into CUDA graphs (their replays run no
Python); forwards that activation checkpointing recomputes during backward (they would count
the same tokens twice).
"""

import weakref

import torch

from ..host_copies import HostCopyQueue
from .moe_layers import find_moe_layers, tensors_in, warn_once

__all__ = ["attach", "flush", "detach_all", "ExpertLoadCapture", "compiled_counting",
           "hidden_from_profiler"]

# Writes a note into the trace (set by the zero-code capture: autocapture.note), so what is not
# captured is said in the trace and the report, not on stderr only.
note_in_trace = None
_noted = set()

_captures = weakref.WeakSet()        # every live capture, for flush() at the end of the run
_hooked_routers = weakref.WeakSet()  # routers that already have a hook (a model seen twice)


# ---- the operator compiled regions call --------------------------------------------------------

# key -> (capture, moe_layer), weakly: the operator's implementation finds its layer here.
_compiled_layers = {}
_next_key = [0]


def _define_compiled_counting():
    """torch.ops.moescope.expert_load(Tensor[] router_outputs, int key) -> (), or None when
    this torch cannot register it (no torch.library.custom_op / effectful ops: torch < 2.4)."""
    custom_op = getattr(torch.library, "custom_op", None)
    register_effect = getattr(torch.library, "_register_effectful_op", None)
    if custom_op is None or register_effect is None:
        return None
    try:
        from torch._library.effects import EffectType
    except ImportError:
        return None

    @custom_op("moescope::expert_load", mutates_args=())
    def expert_load(router_outputs: list[torch.Tensor], key: int) -> None:
        entry = _compiled_layers.get(key)
        if entry is None:
            return
        capture, moe_layer = entry
        output = router_outputs[0] if len(router_outputs) == 1 else tuple(router_outputs)
        try:
            capture._count(moe_layer, output)
        except Exception as error:  # noqa: BLE001 - the program must never see it
            capture._give_up(moe_layer, error)

    @expert_load.register_fake
    def _(router_outputs, key):
        return None

    register_effect(expert_load._opoverload, EffectType.ORDERED)
    return torch.ops.moescope.expert_load.default


try:
    _compiled_expert_load = _define_compiled_counting()
    _compiled_counting_problem = "" if _compiled_expert_load is not None else (
        f"torch {torch.__version__} has no torch.library.custom_op with effects")
except Exception as error:  # noqa: BLE001 - e.g. defined twice by a second copy of moescope
    _compiled_expert_load = None
    _compiled_counting_problem = f"{type(error).__name__}: {error}"


def compiled_counting():
    """(True, "") when compiled regions count through moescope::expert_load, else (False, why)."""
    return _compiled_expert_load is not None, _compiled_counting_problem


class hidden_from_profiler:
    """Runs a block with this thread's RecordFunction off while a torch.profiler (or any
    profiler) is on: moescope's counting operators do not appear in the program's own trace."""

    def __enter__(self):
        enabled = getattr(torch.autograd, "_profiler_enabled", None)
        self.hidden = bool(enabled and enabled())
        if self.hidden:
            torch.autograd._enable_record_function(False)
        return self

    def __exit__(self, *exc):
        if self.hidden:
            torch.autograd._enable_record_function(True)
        return False


def attach(model, record, current_step):
    """Hooks the routers of ``model``'s MoE layers; returns the layers hooked.

    record(step: int, layer: int, counts: torch.Tensor int64 [num_experts] on the host) is
    called for every router forward; current_step() -> int is read at that forward. A router
    that already has a hook from an earlier call is skipped.
    """
    layers = [layer for layer in find_moe_layers(model) if layer.router not in _hooked_routers]
    if layers:
        capture = ExpertLoadCapture(layers, record, current_step)
        _captures.add(capture)
    return layers


def flush():
    """Waits for the counts still in flight (CUDA) and hands them to ``record``."""
    for capture in list(_captures):
        capture.flush()


def detach_all():
    """Removes every hook :func:`attach` registered, after handing over what is in flight."""
    for capture in list(_captures):
        capture.flush()
        capture.detach()


class ExpertLoadCapture:
    """The hooks of one model's routers and the counts they have in flight."""

    def __init__(self, layers, record, current_step):
        self.record = record
        self.current_step = current_step
        # CUDA counts on their way to the host, keyed by (step, layer).
        self.queue = HostCopyQueue(lambda key, counts: record(key[0], key[1], counts))
        self.hooks = {}                          # path -> (router, hook handle)
        self.keys = []                           # this capture's keys in _compiled_layers
        for moe_layer in layers:
            key = _next_key[0]
            _next_key[0] += 1
            _compiled_layers[key] = (self, moe_layer)
            self.keys.append(key)
            handle = moe_layer.router.register_forward_hook(self._make_hook(moe_layer, key))
            self.hooks[moe_layer.path] = (moe_layer.router, handle)
            _hooked_routers.add(moe_layer.router)

    def _make_hook(self, moe_layer, key):
        compiled_op = _compiled_expert_load

        def hook(module, args, output):
            # Under torch.compile this is traced: the first test, then one operator call into
            # the graph, nothing else (any other line could break the graph).
            if _is_compiling():
                if compiled_op is not None:
                    compiled_op([tensor.detach() for tensor in tensors_in(output)], key)
                return None
            try:
                self._on_router_output(moe_layer, output)
            except Exception as error:  # noqa: BLE001 - the program must never see it
                self._give_up(moe_layer, error)
            return None  # the output is left as it is
        return hook

    def _on_router_output(self, moe_layer, output):
        if _on_cuda(output) and torch.cuda.is_current_stream_capturing():
            text = "expert load not captured in CUDA graphs (a replay runs no Python hook)"
            if "expert-load-graph" not in _noted:
                _noted.add("expert-load-graph")
                if note_in_trace is not None:
                    note_in_trace(text)
            warn_once("expert-load-graph", text)
            return
        self._count(moe_layer, output)

    def _count(self, moe_layer, output):
        """Counts one router output and records it (eager hook and compiled operator alike)."""
        if _in_backward_recompute():
            return
        step = int(self.current_step())
        with torch.no_grad(), hidden_from_profiler():
            counts = moe_layer.counts(output)
            if counts.device.type == "cuda":
                self._start_transfer(step, moe_layer, counts)
            else:
                # CPU (or another device, copied plainly: only CUDA is known to need care here).
                self._hand_over_landed()
                self.record(step, moe_layer.layer, counts.to("cpu"))

    def _start_transfer(self, step, moe_layer, counts):
        self.queue.submit((step, moe_layer.layer), counts)

    def _hand_over_landed(self, wait=False):
        self.queue.hand_over_landed(wait)

    def flush(self):
        """Hands over everything in flight, waiting for the copies (call at the end of a run)."""
        try:
            self._hand_over_landed(wait=True)
        except Exception as error:  # noqa: BLE001
            warn_once("expert-load-flush",
                      f"expert load: the last counts were lost ({type(error).__name__}: {error})")

    def detach(self):
        for path in list(self.hooks):
            self._remove_hook(path)
        for key in self.keys:
            _compiled_layers.pop(key, None)

    def _remove_hook(self, path):
        router, handle = self.hooks.pop(path, (None, None))
        if handle is not None:
            handle.remove()
            _hooked_routers.discard(router)

    def _give_up(self, moe_layer, error):
        self._remove_hook(moe_layer.path)
        for key, (capture, layer) in list(_compiled_layers.items()):
            if capture is self and layer is moe_layer:
                del _compiled_layers[key]
        warn_once(("expert-load-hook", moe_layer.family),
                  f"expert load of {moe_layer.family} layer {moe_layer.path} not captured "
                  f"({type(error).__name__}: {error}); its hook is removed, as is that of any "
                  "other layer that fails the same way")


def _in_backward_recompute():
    """True while autograd runs backward on this thread: a forward seen then is activation
    checkpointing recomputing a layer, whose tokens were already counted."""
    current_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)
    return current_graph_task_id is not None and current_graph_task_id() != -1


def _is_compiling():
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling and is_compiling())


def _on_cuda(output):
    tensors = output if isinstance(output, (tuple, list)) else (output,)
    return any(isinstance(tensor, torch.Tensor) and tensor.is_cuda for tensor in tensors)
