"""Phases and module spans without code changes.

Global module hooks (``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook(always_call=True)``) see every module call. A call with no
module around it on its thread is a model's forward: the phase span ``forward`` (domain
``moescope.phase``), and, the first time that model is seen, its modules are named by path
(``model.layers.3.mlp``) and its MoE layers get their expert-load hooks. ``backward`` wraps
``torch.autograd.backward`` (``Tensor.backward`` goes through it); ``optimizer`` comes from the
step tracker's optimizer hooks. A model forward that starts while autograd runs backward on
this thread is activation checkpointing recomputing a part of the model: the phase span
``recompute`` (inside ``backward``), and the ``backward()`` a reentrant checkpoint calls from
there gets no second ``backward`` span. So the phases nest only as recompute-in-backward and
forward + backward (less its recompute) + recompute + optimizer + other is the step.

Under ``torch.compile`` every hook returns at its first test (``torch.compiler.is_compiling``),
so Dynamo traces nothing of them: the same graphs, graph breaks and recompiles as without
moescope. The global hooks make torch warn at each call of a ``torch.compile(module)``
wrapper; the capture wraps that wrapper's ``__call__`` to silence exactly that warning, which
only moescope's hooks cause.

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
        self.recompute_name = _recorder.name("recompute")
        self.routed_tokens_name = _recorder.name("moescope.routed_tokens")
        self.top_k = {}  # layer -> top-k of the first model's MoE layers (tokens = load / k)
        self.expert_load = None  # moescope.autocapture.expert_load_capture, when available
        self.live_metrics = None  # moescope.live_metrics.LiveMetrics, when metrics are on
        self.rank = int(os.environ.get("RANK", "-1") or -1)
        self.broken = False

    def install(self):
        import torch
        from torch.nn.modules import module as module_hooks

        self.is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self.grad_enabled = torch.is_grad_enabled
        task_id = getattr(torch._C, "_current_graph_task_id", None)
        self.in_backward = (lambda: task_id() != -1) if task_id is not None else (lambda: False)
        module_hooks.register_module_forward_pre_hook(self._forward_begins)
        module_hooks.register_module_forward_hook(self._forward_ends, always_call=True)
        self._wrap_backward(torch.autograd)
        self._silence_compiled_module_warning()
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
                if self.in_backward():  # activation checkpointing recomputes a forward
                    library.moescope_span_begin_impl(self.phase_domain, self.recompute_name)
                else:
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
        # torch.compile(model) wraps the model: its hooks fire for the wrapper, eagerly, while
        # the model's own modules run compiled. Name the model (paths without "_orig_mod.").
        if type(root).__name__ == "OptimizedModule" and hasattr(root, "_orig_mod"):
            self.span_ids[root] = 0
            compiled, root = True, root._orig_mod
            if root in self.span_ids:
                return
        else:
            compiled = getattr(root, "_compiled_call_impl", None) is not None
        routers = set()
        if self.expert_load is not None:
            try:
                layers = self.expert_load.attach(root, self._record_expert_load,
                                                 self.steps.current_step)
                routers = {id(layer.router) for layer in layers}
                for layer in layers:
                    self.top_k.setdefault(layer.layer, layer.top_k)
                if layers:
                    note(f"expert load of {len(layers)} MoE layers ({layers[0].family}, top-"
                         f"{layers[0].top_k}) of {type(root).__name__}")
                if layers and compiled:
                    counted, why = self.expert_load.compiled_counting()
                    if counted:
                        note("expert load inside torch.compile regions: counted by the graph's "
                             "moescope::expert_load operator")
                    else:
                        warn(f"expert load not captured inside torch.compile regions ({why})")
                        note(f"expert load not captured inside torch.compile regions ({why})")
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
        expert_load_capture.note_in_trace = note
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
        if self.live_metrics is not None:
            self.live_metrics.on_expert_load(step, layer, values)
        # Tokens the model routed, once per forward (its first MoE layer): what an inference
        # run is measured in (docs/analysis.md).
        if self.top_k and int(layer) == min(self.top_k):
            _recorder.library.moescope_counter(self.routed_tokens_name,
                                               sum(values) / self.top_k[int(layer)])

    # ---- backward -------------------------------------------------------------------------------

    def _wrap_backward(self, autograd):
        original = autograd.backward
        capture = self

        @functools.wraps(original)
        def backward(*args, **kwargs):
            # A reentrant activation checkpoint calls backward() from inside backward: that is
            # the outer backward's time, not a second phase.
            if capture.broken or not _recorder.recording() or capture.in_backward():
                return original(*args, **kwargs)
            capture.steps.on_backward()
            _recorder.library.moescope_span_begin_impl(capture.phase_domain, capture.backward_name)
            try:
                return original(*args, **kwargs)
            finally:
                if _recorder.recording():
                    _recorder.library.moescope_span_end_impl()

        autograd.backward = backward

    def _silence_compiled_module_warning(self):
        """torch.compile(module)'s wrapper warns at each call while any global module hook is
        registered: only moescope's are, for a program that registers none, so that warning
        is ours to silence (no warnings filter is touched: the program's own warnings show as
        they would). Done when the program imports Dynamo, never by importing it: importing
        torch._dynamo changes a program (non-reentrant activation checkpointing runs ~3x
        slower on CPU with it imported, torch 2.11)."""
        from . import after_import
        after_import("torch._dynamo.eval_frame", self._patch_optimized_module)

    def _patch_optimized_module(self, eval_frame):
        try:
            self._patch_optimized_module_call(eval_frame)
        except Exception as error:  # noqa: BLE001 - the program's import must go on
            warn(f"torch.compile wrapper left as it is: {type(error).__name__}: {error}")

    def _patch_optimized_module_call(self, eval_frame):
        import torch
        OptimizedModule = getattr(eval_frame, "OptimizedModule", None)
        if OptimizedModule is None:
            return
        original = OptimizedModule.__call__
        from torch.nn.modules import module as module_hooks
        ours = (self._forward_begins, self._forward_ends)

        def only_ours():
            pre = list(getattr(module_hooks, "_global_forward_pre_hooks", {}).values())
            post = list(getattr(module_hooks, "_global_forward_hooks", {}).values())
            return all(hook in ours for hook in pre + post) and not any(
                getattr(module_hooks, name, None)
                for name in ("_global_backward_pre_hooks", "_global_backward_hooks",
                             "_global_buffer_registration_hooks",
                             "_global_module_registration_hooks",
                             "_global_parameter_registration_hooks"))

        # torch 2.11's __call__ is "warn if any global hook, then Module.__call__ inside
        # _set_in_optimized_module()": the same without the warning when the hooks are ours.
        # Another torch: left alone (the warning may then show).
        in_optimized_module = getattr(eval_frame, "_set_in_optimized_module", None)
        if in_optimized_module is None or "_has_any_global_hook" not in original.__code__.co_names:
            return
        module_call = torch.nn.Module.__call__

        @functools.wraps(original)
        def __call__(wrapper, *args, **kwargs):
            if not only_ours():
                return original(wrapper, *args, **kwargs)
            with in_optimized_module():
                return module_call(wrapper, *args, **kwargs)

        OptimizedModule.__call__ = __call__
