"""ctypes bindings of the recorder C API (moescope/recorder.h), shared by the annotation functions
(``moescope``) and the zero-code capture (``moescope.autocapture``).

The library is looked up in this order: the shim or libmoescope_recorder already loaded in this
process, ``MOESCOPE_LIBRARY``, then the shim of the installation this module belongs to
(``cmake --install`` puts the module in ``share/moescope/python``, the pip wheel in
site-packages; both write ``_install_layout.py``), the ``lib/`` of this Python's prefix (a pip
install whose site-packages is not under ``<prefix>/lib``, e.g. ``lib64``), or
``build/lib/libmoescope_inject.so`` of the source tree it lives in. Loading a library does not
start a recording; ``moescope record`` does. Without a library every caller sees ``library is
None`` and does nothing.
"""

import ctypes
import os
import sys

# Scopes of an expert-load sample (enum moescope_expert_scope).
SCOPES = {"local": 0, "global": 1, "received": 2}

# enum moescope_comm_kind
COMM_KINDS = {
    "all_reduce": 1, "all_gather": 2, "reduce_scatter": 3, "broadcast": 4, "reduce": 5,
    "all_to_all": 6, "send": 7, "recv": 8, "barrier": 9, "gather": 12, "scatter": 13,
}


class CommOpInfo(ctypes.Structure):
    """struct moescope_comm_op_info."""
    _fields_ = [
        ("kind", ctypes.c_uint32), ("dtype", ctypes.c_uint32), ("count", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64), ("comm_id", ctypes.c_uint64), ("group_id", ctypes.c_uint64),
        ("rank", ctypes.c_int32), ("num_ranks", ctypes.c_int32), ("peer", ctypes.c_int32),
        ("root", ctypes.c_int32), ("device", ctypes.c_int32), ("stream", ctypes.c_uint32),
        ("sequence", ctypes.c_uint32), ("enqueue_ns", ctypes.c_uint64),
        ("start_ns", ctypes.c_uint64), ("end_ns", ctypes.c_uint64),
        ("split_bytes", ctypes.POINTER(ctypes.c_uint64)), ("num_splits", ctypes.c_uint32),
        ("name", ctypes.c_uint32),
    ]


# The C functions this module calls: (argument types, return type), as recorder.h declares them
# (tests/python/test_recorder_abi.py compiles these against the header).
SIGNATURES = {
    "moescope_intern": ([ctypes.c_char_p], ctypes.c_uint32),
    "moescope_now_ns": ([], ctypes.c_uint64),
    "moescope_span_begin_impl": ([ctypes.c_uint32, ctypes.c_uint32], None),
    "moescope_span_end_impl": ([], None),
    "moescope_span_complete": ([ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64,
                                ctypes.c_uint64], None),
    "moescope_instant": ([ctypes.c_uint32, ctypes.c_uint32], None),
    "moescope_counter": ([ctypes.c_uint32, ctypes.c_double], None),
    "moescope_step": ([ctypes.c_int64], None),
    "moescope_thread_name": ([ctypes.c_char_p], None),
    "moescope_expert_load": ([ctypes.c_int64, ctypes.c_uint32, ctypes.c_int32,
                              ctypes.c_uint32, ctypes.POINTER(ctypes.c_int64),
                              ctypes.c_uint32, ctypes.c_uint64], None),
    "moescope_comm_op": ([ctypes.POINTER(CommOpInfo)], None),
}
# Newer than some installed shims: bound where the library has them.
OPTIONAL_SIGNATURES = {
    "moescope_step_end": ([ctypes.c_int64], None),
}


def _bind(library):
    for name, (argtypes, restype) in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes, function.restype = argtypes, restype
    for name, (argtypes, restype) in OPTIONAL_SIGNATURES.items():
        if hasattr(library, name):
            function = getattr(library, name)
            function.argtypes, function.restype = argtypes, restype
    return library


def _load():
    candidates = [None]  # the process's global namespace: a preloaded shim is there
    if os.environ.get("MOESCOPE_LIBRARY"):
        candidates.append(os.environ["MOESCOPE_LIBRARY"])
    here = os.path.dirname(os.path.realpath(__file__))
    try:  # an installed copy: cmake --install wrote where the libraries are
        from . import _install_layout
        candidates.append(os.path.normpath(os.path.join(
            here, _install_layout.LIBRARY_DIR, "libmoescope_inject.so")))
        candidates.append(os.path.join(sys.prefix, "lib", "libmoescope_inject.so"))
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


library, _recording_flag = _load()


def recording():
    """True while a recorder writes a trace in this process."""
    return _recording_flag is not None and _recording_flag.value != 0


# Interned ids are per recording: a forked child starts its own recording (--fork=trace) with
# a new string table, so the cache starts over there.
_names = {}
os.register_at_fork(after_in_child=_names.clear)


def name(text):
    """The interned id of `text` (cached: interning is a lock and a hash lookup in C)."""
    text = str(text)
    found = _names.get(text)
    if found is None:
        found = library.moescope_intern(text.encode("utf-8"))
        _names[text] = found
    return found
