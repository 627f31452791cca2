"""Phases and module spans without code changes.

Global module hooks (``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook(always_call=True)``) see every module call. A call with no
module around it on its thread is a model's forward: the phase span ``forward`` (domain
``moescope.phase``), and, the first time that model is seen, its modules are named by path
(``model.layers.3.mlp``) and its MoE layers get their expert-load hooks. ``backward`` wraps
``torch.autograd.backward`` (``Tensor.backward`` goes through it); ``optimizer`` comes from the
step tracker's optimizer hooks.

Which modules get a span (domain ``moescope.module``): a "repeated block" is a module whose
path ends in a number (an entry of a ModuleList/ModuleDict: ``model.layers.3``); its depth is 0,
its children 1, and so on; outside any block, a model's children have depth 0. Modules down to
``--module-depth`` (default 2) get a span when they hold parameters, except small leaves
(plain ``torch.nn`` modules, norms, embeddings), unless they are a MoE router. So a Mixtral decoder layer shows ``self_attn``, ``block_sparse_moe``, its ``gate``
(router) and ``experts``.
"""

import atexit
import ctypes
import functools
import os
import threading
import weakref

from .. import _recorder
from . import note, warn


def depth_of(path):
    """Depth of a module path below its repeated block (see the module's docstring)."""
    parts = path.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return len(parts) - 1 - index
    return len(parts) - 1


_SMALL_LEAF_NAMES = ("Norm", "Embedding", "Dropout", "Rotary")


def is_small_leaf(module):
    """A leaf too small to be worth a span: plain torch.nn modules (Linear, LayerNorm, ...) and
    models' own norms, embeddings and rotary tables (LlamaRMSNorm, MixtralRotaryEmbedding)."""
    if any(True for _ in module.children()):
        return False
    cls = type(module)
    return cls.__module__.startswith("torch.nn.") or any(
        part in cls.__name__ for part in _SMALL_LEAF_NAMES)


class ModuleCapture:
    def __init__(self, config, steps):
        self.config = config
        self.steps = steps
        self.span_ids = weakref.WeakKeyDictionary()  # module -> interned path (0: no span)
        self.paths = weakref.WeakKeyDictionary()     # module -> path, for the step marker
        self.local = threading.local()
        self.phase_domain = _recorder.name("moescope.phase")
        self.module_domain = _recorder.name("moescope.module")
        self.forward_name = _recorder.name("forward")
        self.backward_name = _recorder.name("backward")
        self.expert_load = None  # moescope.autocapture.expert_load_capture, when available
        self.rank = int(os.environ.get("RANK", "-1") or -1)
        self.broken = False

    def install(self):
        import torch
        from torch.nn.modules import module as module_hooks

        self.is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self.grad_enabled = torch.is_grad_enabled
        module_hooks.register_module_forward_pre_hook(self._forward_begins)
        module_hooks.register_module_forward_hook(self._forward_ends, always_call=True)
        self._wrap_backward(torch.autograd)
        self._load_expert_load_capture()

    # ---- forward --------------------------------------------------------------------------------

    def _stack(self):
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def _forward_begins(self, module, args):
        if self.broken or self.is_compiling() or not _recorder.recording():
            return None
        try:
            stack = self._stack()
            library = _recorder.library
            if not stack:
                if module not in self.span_ids:
                    self._name_model(module)
                self.steps.on_root_forward(self.grad_enabled())
                library.moescope_span_begin_impl(self.phase_domain, self.forward_name)
                stack.append(-1)  # the phase span
            span = self.span_ids.get(module, 0)
            if span:
                library.moescope_span_begin_impl(self.module_domain, span)
                if self.steps.marker_kind == "module":
                    self.steps.on_module_forward(self.paths.get(module, ""), module)
            stack.append(span)
        except Exception as error:  # noqa: BLE001
            self._give_up(error)
        return None

    def _forward_ends(self, module, args, output):
        if self.broken or self.is_compiling():
            return None
        try:
            stack = self._stack()
            if not stack:
                return None  # begun before the hooks were installed, or while not recording
            span = stack.pop()
            if span and _recorder.recording():
                _recorder.library.moescope_span_end_impl()
            if len(stack) == 1 and stack[0] == -1:
                stack.pop()
                if _recorder.recording():
                    _recorder.library.moescope_span_end_impl()
        except Exception as error:  # noqa: BLE001
            self._give_up(error)
        return None

    def _give_up(self, error):
        self.broken = True
        warn(f"module capture stopped: {type(error).__name__}: {error}")
        note(f"module capture stopped: {type(error).__name__}: {error}")

    # ---- naming a model the first time it runs ----------------------------------------------------

    def _name_model(self, root):
        routers = set()
        if self.expert_load is not None:
            try:
                layers = self.expert_load.attach(root, self._record_expert_load,
                                                 self.steps.current_step)
                routers = {id(layer.router) for layer in layers}
                if layers:
                    note(f"expert load of {len(layers)} MoE layers ({layers[0].family}) of "
                         f"{type(root).__name__}")
            except Exception as error:  # noqa: BLE001
                warn(f"expert load not captured: {type(error).__name__}: {error}")
                note(f"expert load not captured: {type(error).__name__}: {error}")
        depth_limit = self.config.module_depth
        for path, module in root.named_modules():
            if module in self.span_ids:
                continue  # shared, or a model seen before inside this one
            self.paths[module] = path
            wanted = (path != "" and depth_limit >= 0 and depth_of(path) <= depth_limit
                      and (id(module) in routers
                           or (any(True for _ in module.parameters())
                               and not is_small_leaf(module))))
            self.span_ids[module] = _recorder.name(path) if wanted else 0

    def _load_expert_load_capture(self):
        try:
            from . import expert_load_capture
        except ImportError as error:
            note(f"expert load not captured: {error}")
            return
        self.expert_load = expert_load_capture
        # Counts of the last steps may still be on their way from a GPU: hand them over before
        # the recorder's own exit handler (registered earlier, so it runs after this) closes.
        atexit.register(expert_load_capture.flush)

    def _record_expert_load(self, step, layer, counts):
        """Tokens per expert of one layer: `counts` is a host tensor [num_experts]."""
        if not _recorder.recording():
            return
        values = [int(value) for value in counts.tolist()]
        array = (ctypes.c_int64 * len(values))(*values)
        _recorder.library.moescope_expert_load(int(step), int(layer), self.rank,
                                               _recorder.SCOPES["local"], array, len(values), 0)

    # ---- backward -------------------------------------------------------------------------------

    def _wrap_backward(self, autograd):
        original = autograd.backward
        capture = self

        @functools.wraps(original)
        def backward(*args, **kwargs):
            if capture.broken or not _recorder.recording():
                return original(*args, **kwargs)
            _recorder.library.moescope_span_begin_impl(capture.phase_domain, capture.backward_name)
            try:
                return original(*args, **kwargs)
            finally:
                if _recorder.recording():
                    _recorder.library.moescope_span_end_impl()

        autograd.backward = backward
