"""moescope annotations for Python programs that do not use the moescope runtime.

Run the program under ``moescope record`` and call, for example::

    import moescope
    moescope.step(step)
    with moescope.range("router"):
        counts = torch.bincount(expert_index, minlength=num_experts)
    moescope.expert_load(layer, counts)          # one line per MoE layer

The calls go through ctypes to the recorder C API (moescope/recorder.h) of the capture shim that
``moescope record`` preloads. Without an active recorder (the program runs on its own, or the
library cannot be found) every function is a no-op, so annotated code runs anywhere; the first
such call says so in one line on stderr (``moescope: not being recorded ...``).

The library is found as ``moescope._recorder`` says: the shim ``moescope record`` preloads
first. Under ``moescope record`` a Python program is also captured without any of these calls
(steps, phases, module spans, collectives, expert load: ``moescope.autocapture``); the calls add
what only the program knows.
"""

import contextlib
import ctypes
import os

from . import _recorder
from ._recorder import recording

__all__ = ["expert_load", "range", "step", "counter", "mark", "thread_name", "recording"]

_library = _recorder.library
_SCOPES = _recorder.SCOPES
# The step in progress: set by moescope.step() or by the zero-code capture
# (moescope.autocapture); -1 when unknown, and the analysis then takes the step in progress at
# the sample's time.
_current_step = -1
_user_numbers_steps = [False]


def _name(text):
    return _recorder.name(text)


_said_not_recording = []


def _recording_or_say_so(function):
    """recording(); the first time it is False outside `moescope record`, one line on stderr
    naming `function`. Under `record` a process can be left out on purpose (--ranks, --steps
    windows, --delay): silent there."""
    if recording():
        return True
    if not _said_not_recording and "MOESCOPE_AUTOCAPTURE" not in os.environ:
        _said_not_recording.append(function)
        import sys
        sys.stderr.write("moescope: not being recorded, so moescope.%s() and the other "
                         "annotations do nothing (run the program under `moescope record`)\n"
                         % function)
    return False


def _counts_list(counts):
    """Tokens per expert as a list of ints, from a list, numpy array or CPU torch tensor."""
    if hasattr(counts, "detach"):  # torch.Tensor
        counts = counts.detach().cpu()
    if hasattr(counts, "tolist"):
        counts = counts.tolist()
    if any(isinstance(value, (list, tuple)) for value in counts):
        raise ValueError("moescope.expert_load: counts must be one-dimensional [num_experts]")
    return [int(value) for value in counts]


def _record_expert_load(key, counts):
    step, layer, rank, scope, dropped = key
    values = _counts_list(counts)
    array = (ctypes.c_int64 * len(values))(*values)
    _library.moescope_expert_load(int(step), int(layer), int(rank), scope, array, len(values),
                                  int(dropped))


_cuda_counts = []  # the HostCopyQueue for CUDA counts, made at the first one


def _queue_for_cuda():
    if not _cuda_counts:
        import atexit

        from .host_copies import HostCopyQueue
        _cuda_counts.append(HostCopyQueue(_record_expert_load))
        atexit.register(_cuda_counts[0].flush)
    return _cuda_counts[0]


def expert_load(layer, counts, step=None, rank=None, dropped=0, scope="local"):
    """Records tokens per expert of one MoE layer.

    layer: layer index. counts: tokens routed to each expert, ``[num_experts]`` (list, numpy
    array or torch tensor; a CUDA tensor is copied without waiting for the GPU and recorded
    once the copy has landed, at a later call or at the end of the run). step: training step
    (default: the step in progress, from ``moescope.step`` or the zero-code capture; when
    neither knows, the analysis takes the step in progress at this call's time). rank: this
    process's rank (default: ``RANK`` from the environment). dropped: tokens dropped by the
    capacity limit. scope: "local" (this rank's router), "global" (summed over the
    expert-parallel group) or "received" (tokens this rank's experts received).
    """
    if not _recording_or_say_so("expert_load"):
        return
    if scope not in _SCOPES:
        raise ValueError("moescope.expert_load: scope must be one of %s, got %r"
                         % (sorted(_SCOPES), scope))
    if step is None:
        step = _current_step
    if rank is None:
        rank = int(os.environ.get("RANK", "-1"))
    key = (step, layer, rank, _SCOPES[scope], dropped)
    if getattr(counts, "is_cuda", False):
        # Never waits for the GPU: copied behind an event, recorded once it landed (a later
        # call, or the end of the run), with the step it belongs to.
        if counts.dim() != 1:
            raise ValueError("moescope.expert_load: counts must be one-dimensional [num_experts]")
        _queue_for_cuda().submit(key, counts.detach().long())
        return
    _record_expert_load(key, counts)


class range(contextlib.ContextDecorator):  # noqa: A001 - mirrors nvtx.range / torch's naming
    """A span on the calling thread: ``with moescope.range("forward"): ...`` or a decorator."""

    def __init__(self, name, domain=None):
        self.name = name
        self.domain = domain
        self._opened = []  # one entry per nested use of this object (recursive decorators)

    def __enter__(self):
        opened = _recording_or_say_so("range")
        if opened:
            domain = _name(self.domain) if self.domain else 0
            _library.moescope_span_begin_impl(domain, _name(self.name))
        self._opened.append(opened)
        return self

    def __exit__(self, *exc):
        if self._opened.pop() and recording():
            _library.moescope_span_end_impl()
        return False


def step(number):
    """Marks the start of training step ``number`` (used for step detection). A program that
    numbers its steps itself turns off the zero-code capture's own step markers."""
    global _current_step
    _current_step = int(number)
    _user_numbers_steps[0] = True
    if _recording_or_say_so("step"):
        _library.moescope_step(_current_step)


def counter(name, value):
    """A sample of a named counter (loss, learning rate, tokens/s ...)."""
    if _recording_or_say_so("counter"):
        _library.moescope_counter(_name(name), float(value))


def mark(name, domain=None):
    """An instant event."""
    if _recording_or_say_so("mark"):
        _library.moescope_instant(_name(domain) if domain else 0, _name(name))


def thread_name(name):
    """Names the calling thread's track in the trace."""
    if _recording_or_say_so("thread_name"):
        _library.moescope_thread_name(str(name).encode("utf-8"))
