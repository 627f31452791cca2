"""moescope annotations for Python programs that do not use the moescope runtime.

Run the program under ``moescope record`` and call, for example::

    import moescope
    moescope.step(step)
    with moescope.range("router"):
        counts = torch.bincount(expert_index, minlength=num_experts)
    moescope.expert_load(layer, counts)          # one line per MoE layer

The calls go through ctypes to the recorder C API (moescope/recorder.h) of the capture shim that
``moescope record`` preloads. Without an active recorder (the program runs on its own, or the
library cannot be found) every function is a silent no-op, so annotated code runs anywhere.

The library is looked up in this order: the shim or libmoescope_recorder already loaded in
this process, ``MOESCOPE_LIBRARY``, then the shim of the installation this module belongs to
(``cmake --install`` puts the module in ``share/moescope/python``; ``moescope record`` adds that
to ``PYTHONPATH``) or ``build/lib/libmoescope_inject.so`` of the source tree it lives in.
Loading a library does not start a recording; ``moescope record`` does.
"""

import contextlib
import ctypes
import os

__all__ = ["expert_load", "range", "step", "counter", "mark", "thread_name", "recording"]

# Scopes of an expert-load sample (enum moescope_expert_scope).
_SCOPES = {"local": 0, "global": 1, "received": 2}


def _bind(library):
    library.moescope_intern.argtypes = [ctypes.c_char_p]
    library.moescope_intern.restype = ctypes.c_uint32
    library.moescope_span_begin_impl.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
    library.moescope_span_begin_impl.restype = None
    library.moescope_span_end_impl.argtypes = []
    library.moescope_span_end_impl.restype = None
    library.moescope_instant.argtypes = [ctypes.c_uint32, ctypes.c_uint32]
    library.moescope_instant.restype = None
    library.moescope_counter.argtypes = [ctypes.c_uint32, ctypes.c_double]
    library.moescope_counter.restype = None
    library.moescope_step.argtypes = [ctypes.c_int64]
    library.moescope_step.restype = None
    library.moescope_thread_name.argtypes = [ctypes.c_char_p]
    library.moescope_thread_name.restype = None
    library.moescope_expert_load.argtypes = [
        ctypes.c_int64, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_int64), ctypes.c_uint32, ctypes.c_uint64]
    library.moescope_expert_load.restype = None
    return library


def _load():
    candidates = [None]  # the process's global namespace: a preloaded shim is there
    if os.environ.get("MOESCOPE_LIBRARY"):
        candidates.append(os.environ["MOESCOPE_LIBRARY"])
    here = os.path.dirname(os.path.abspath(__file__))
    try:  # an installed copy: cmake --install wrote where the libraries are
        from . import _install_layout
        candidates.append(os.path.normpath(os.path.join(
            here, _install_layout.LIBRARY_DIR, "libmoescope_inject.so")))
    except ImportError:  # the source tree: profiler/python/moescope
        source_root = os.path.dirname(os.path.dirname(os.path.dirname(here)))
        candidates.append(os.path.join(source_root, "build", "lib", "libmoescope_inject.so"))
    for candidate in candidates:
        if candidate is not None and not os.path.exists(candidate):
            continue
        try:
            library = ctypes.CDLL(candidate)
            flag = ctypes.c_int.in_dll(library, "moescope_recording")
            return _bind(library), flag
        except (OSError, ValueError, AttributeError):
            continue
    return None, None


_library, _recording_flag = _load()
_current_step = -1


def recording():
    """True while a recorder writes a trace in this process."""
    return _recording_flag is not None and _recording_flag.value != 0


def _name(text):
    return _library.moescope_intern(str(text).encode("utf-8"))


def _counts_list(counts):
    """Tokens per expert as a list of ints, from a list, numpy array or torch tensor."""
    if hasattr(counts, "detach"):  # torch.Tensor (a CUDA tensor is copied to the host)
        counts = counts.detach().cpu()
    if hasattr(counts, "tolist"):
        counts = counts.tolist()
    if any(isinstance(value, (list, tuple)) for value in counts):
        raise ValueError("moescope.expert_load: counts must be one-dimensional [num_experts]")
    return [int(value) for value in counts]


def expert_load(layer, counts, step=None, rank=None, dropped=0, scope="local"):
    """Records tokens per expert of one MoE layer.

    layer: layer index. counts: tokens routed to each expert, ``[num_experts]`` (list, numpy
    array or torch tensor). step: training step (default: the last ``moescope.step``). rank:
    this process's rank (default: ``RANK`` from the environment). dropped: tokens dropped by
    the capacity limit. scope: "local" (this rank's router), "global" (summed over the
    expert-parallel group) or "received" (tokens this rank's experts received).
    """
    if not recording():
        return
    if scope not in _SCOPES:
        raise ValueError("moescope.expert_load: scope must be one of %s, got %r"
                         % (sorted(_SCOPES), scope))
    values = _counts_list(counts)
    if step is None:
        step = _current_step
    if rank is None:
        rank = int(os.environ.get("RANK", "-1"))
    array = (ctypes.c_int64 * len(values))(*values)
    _library.moescope_expert_load(int(step), int(layer), int(rank), _SCOPES[scope], array,
                                  len(values), int(dropped))


class range(contextlib.ContextDecorator):  # noqa: A001 - mirrors nvtx.range / torch's naming
    """A span on the calling thread: ``with moescope.range("forward"): ...`` or a decorator."""

    def __init__(self, name, domain=None):
        self.name = name
        self.domain = domain
        self._opened = []  # one entry per nested use of this object (recursive decorators)

    def __enter__(self):
        opened = recording()
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
    """Marks the start of training step ``number`` (used for step detection)."""
    global _current_step
    _current_step = int(number)
    if recording():
        _library.moescope_step(_current_step)


def counter(name, value):
    """A sample of a named counter (loss, learning rate, tokens/s ...)."""
    if recording():
        _library.moescope_counter(_name(name), float(value))


def mark(name, domain=None):
    """An instant event."""
    if recording():
        _library.moescope_instant(_name(domain) if domain else 0, _name(name))


def thread_name(name):
    """Names the calling thread's track in the trace."""
    if recording():
        _library.moescope_thread_name(str(name).encode("utf-8"))
