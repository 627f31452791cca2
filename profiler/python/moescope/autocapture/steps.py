"""Training steps without code changes: where each step starts and ends.

Sources, in order of precedence:
1. the program numbers steps itself (``moescope.step``): the capture stays out of the way;
2. a marker the user named with ``moescope record --step-marker``: ``module:NAME`` (each forward
   of the module whose path or class is NAME starts a step) or ``function:MODULE:QUALNAME``
   (each call of that function is a step);
3. ``torch.profiler`` step calls (``prof.step()``), once the program makes one: each call ends
   the step in progress and the next step starts at the next model forward, so the call after
   the last iteration opens no empty step (steps = the program's iterations);
4. optimizer steps: a step starts at the first forward with gradients enabled and ends when
   an optimizer step finishes (more optimizers in one iteration: the first one ends it). A
   trailing forward without an optimizer step (evaluation, the end of the run) is no step.

Steps are numbered from 0 in each process, so ranks that train in lockstep number alike.
"""

import functools
import time

from .. import _recorder
from . import after_import, note, warn


class StepTracker:
    def __init__(self, config):
        self.marker_kind, _, self.marker_name = config.step_marker.partition(":")
        if self.marker_kind not in ("", "module", "function"):
            warn(f"ignoring --step-marker {config.step_marker!r} (expected module:NAME or "
                 "function:MODULE:QUALNAME)")
            self.marker_kind = ""
        self.profiler_steps = False
        self.profiler_step_pending = False  # prof.step() was called: the next forward begins one
        self.next_step = 0
        self.in_step = False
        self.step_began = 0.0
        self.live_metrics = None  # moescope.live_metrics.LiveMetrics, when metrics are on
        self.phase_domain = _recorder.name("moescope.phase")
        self.optimizer_name = _recorder.name("optimizer")

    # ---- the state ----------------------------------------------------------------------------

    def _user_numbers_steps(self):
        import moescope
        return moescope._user_numbers_steps[0]

    def begin(self):
        if self.in_step or self._user_numbers_steps() or not _recorder.recording():
            return
        import moescope
        _recorder.library.moescope_step(self.next_step)
        moescope._current_step = self.next_step
        self.in_step = True
        self.step_began = time.perf_counter()

    def end(self):
        if not self.in_step:
            return
        import moescope
        if hasattr(_recorder.library, "moescope_step_end"):
            _recorder.library.moescope_step_end(self.next_step)
        moescope._current_step = -1
        if self.live_metrics is not None:
            self.live_metrics.on_step_end(self.next_step, time.perf_counter() - self.step_began)
        self.next_step += 1
        self.in_step = False

    def current_step(self):
        """The step in progress, or -1 between steps (the analysis then goes by time)."""
        import moescope
        return moescope._current_step

    # ---- what moves it ------------------------------------------------------------------------

    def on_root_forward(self, grad_enabled):
        """A forward of a model (no enclosing module) starts."""
        if self.marker_kind:
            return
        if self.profiler_steps:
            if self.profiler_step_pending:
                self.profiler_step_pending = False
                self.begin()
        elif grad_enabled:
            self.begin()

    def on_backward(self):
        """backward() starts: a step whose forward ran unseen (a model compiled whole with
        ``module.compile()`` runs its hooks inside the graph) begins here."""
        if not self.marker_kind and not self.profiler_steps:
            self.begin()

    def on_module_forward(self, path, module):
        """Any recorded module's forward starts (for --step-marker module:NAME)."""
        if self.marker_kind == "module" and (path == self.marker_name
                                             or type(module).__name__ == self.marker_name):
            self.end()
            self.begin()

    def install(self):
        import torch
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)

        register_optimizer_step_pre_hook(self._optimizer_step_begins)
        register_optimizer_step_post_hook(self._optimizer_step_ends)
        self._watch_profiler(torch.profiler.profile)
        if self.marker_kind == "function":
            self._wrap_marker_function()

    def _optimizer_step_begins(self, optimizer, args, kwargs):
        try:
            if _recorder.recording():
                _recorder.library.moescope_span_begin_impl(self.phase_domain, self.optimizer_name)
        except Exception as error:  # noqa: BLE001
            warn(f"step capture: {error}")

    def _optimizer_step_ends(self, optimizer, args, kwargs):
        try:
            if _recorder.recording():
                _recorder.library.moescope_span_end_impl()
            if not self.marker_kind and not self.profiler_steps:
                self.end()
        except Exception as error:  # noqa: BLE001
            warn(f"step capture: {error}")

    def _watch_profiler(self, profile_class):
        """prof.step() ends a step, the next model forward starts the next; from the first call
        on, they alone do."""
        original = profile_class.step
        tracker = self

        @functools.wraps(original)
        def step(profiler, *args, **kwargs):
            result = original(profiler, *args, **kwargs)
            try:
                if not tracker.marker_kind:
                    if not tracker.profiler_steps:
                        tracker.profiler_steps = True
                        note("steps from torch.profiler step calls")
                    tracker.end()
                    tracker.profiler_step_pending = True
            except Exception as error:  # noqa: BLE001
                warn(f"step capture: {error}")
            return result

        profile_class.step = step

    def _wrap_marker_function(self):
        """Wraps MODULE.QUALNAME once the program imports MODULE (never imports it itself)."""
        module_name, _, qualname = self.marker_name.partition(":")
        if not module_name or not qualname:
            warn(f"--step-marker function:{self.marker_name}: expected function:MODULE:QUALNAME")
            self.marker_kind = ""
            return
        after_import(module_name, lambda module: self._wrap(module, qualname))

    def _wrap(self, module, qualname):
        try:
            owner = module
            parts = qualname.split(".")
            for part in parts[:-1]:
                owner = getattr(owner, part)
            original = getattr(owner, parts[-1])
        except AttributeError as error:
            warn(f"--step-marker function:{self.marker_name} not found ({error}): no steps")
            return
        tracker = self

        @functools.wraps(original)
        def marked(*args, **kwargs):
            tracker.end()
            tracker.begin()
            try:
                return original(*args, **kwargs)
            finally:
                tracker.end()

        setattr(owner, parts[-1], marked)
        note(f"steps from calls of {self.marker_name}")
