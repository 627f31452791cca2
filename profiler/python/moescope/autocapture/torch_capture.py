"""Loads moescope's C++ PyTorch capture (libmoescope_torch_capture.so) into this process.

It records what only C++ sees: every ``torch.distributed`` collective, also those DDP and FSDP
issue from C++ (kind, bytes, dtype, process group, rank, group size, all-to-all split bytes,
execution time on Gloo's worker threads), and with ``ops=True`` every ATen operator as a span
named with its input shapes. See docs/capture.md, "PyTorch capture from C++".

Call ``start()`` once, after ``import torch``, in a process running under ``moescope record``::

    started, reason = torch_capture.start()

The library is found through ``MOESCOPE_TORCH_CAPTURE_LIBRARY``, else next to the capture shim
loaded in this process (``libmoescope_inject.so``, found in /proc/self/maps: a CMake build or
install), else in the per-user cache ``torch_capture_build.py`` compiles it into for this torch
(the pip route: the wheel ships the sources). It is built for one torch version, written next to
it in ``libmoescope_torch_capture.so.torch_version``; a library built for another version is
refused without being loaded, and the program runs on uncaptured. When no library fits, the
first recording starts building one in the background and records on without it. Nothing here
raises: every failure is the ``(False, reason)`` answer.
"""

import ctypes
import os
import sys

__all__ = ["start", "stop", "find_library", "built_for", "LIBRARY_NAME"]

LIBRARY_NAME = "libmoescope_torch_capture.so"
VERSION_SUFFIX = ".torch_version"
_SHIM_NAMES = ("libmoescope_inject.so", "libmoescope_inject_no_nccl.so")

# enum moescope_torch_capture_flags (moescope/torch_capture/torch_capture.h)
COLLECTIVES = 1
OPS = 2

_library = None


def _loaded_shim_folder():
    """Folder of the capture shim mapped into this process, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)  # address perms offset device inode [path]
                path = fields[5].strip() if len(fields) == 6 else ""
                if os.path.basename(path) in _SHIM_NAMES:
                    return os.path.dirname(path)
    except OSError:
        pass
    return None


def find_library(torch=None, build_when_missing=False):
    """(path, reason): where the library is, or None and why it was not found. With `torch`,
    the per-user cache of builds for that torch is searched after the shim's folder, and with
    `build_when_missing` a build is started there when nothing was found."""
    override = os.environ.get("MOESCOPE_TORCH_CAPTURE_LIBRARY")
    if override:
        if os.path.isfile(override):
            return override, ""
        return None, "MOESCOPE_TORCH_CAPTURE_LIBRARY=%s: no such file" % override
    folder = _loaded_shim_folder()
    if folder is None:
        return None, "the moescope capture shim is not loaded (run under `moescope record`)"
    path = os.path.join(folder, LIBRARY_NAME)
    if os.path.isfile(path):
        running = getattr(torch, "__version__", None)
        if torch is None or built_for(path) == str(running):
            return path, ""
        # Built with moescope for another torch: a build for this one may be in the cache.
        cached, _ = _cached(torch)
        return (cached, "") if cached else (path, "")
    if torch is None:
        return None, "%s not found next to the shim in %s" % (LIBRARY_NAME, folder)
    cached, why = _cached(torch)
    if cached:
        return cached, ""
    if why or not build_when_missing or not _builds_on_first_use():
        why = why or "not built for torch %s (`python -m moescope build-capture` builds it)" % (
            torch.__version__)
        return None, "%s is not next to the shim in %s and %s" % (LIBRARY_NAME, folder, why)
    try:
        from . import torch_capture_build
        started = torch_capture_build.start_background_build(torch)
    except Exception as error:  # noqa: BLE001 - the program runs on without it
        started = "its build could not be started: %s: %s" % (type(error).__name__, error)
    return None, "%s was not built for torch %s yet: %s" % (LIBRARY_NAME, torch.__version__,
                                                            started)


def _builds_on_first_use():
    """A pip install builds the library on first use (its wheel ships the sources, not the
    library); a source build only when asked: MOESCOPE_BUILD_CAPTURE=1 (0: never)."""
    wanted = os.environ.get("MOESCOPE_BUILD_CAPTURE", "")
    if wanted in ("0", "1"):
        return wanted == "1"
    try:
        from . import torch_capture_build
        return torch_capture_build.shipped_sources()
    except Exception:  # noqa: BLE001
        return False


def _cached(torch):
    """(path, reason) of the per-user cache's build for `torch` (torch_capture_build.py)."""
    try:
        from . import torch_capture_build
        return torch_capture_build.cached_library(torch)
    except Exception as error:  # noqa: BLE001
        return None, "the build cache is unreadable: %s: %s" % (type(error).__name__, error)


def built_for(path):
    """The torch version the library at `path` was built for, from its version file, or None."""
    try:
        with open(path + VERSION_SUFFIX) as version_file:
            return version_file.read().strip() or None
    except OSError:
        return None


def start(collectives=True, ops=False):
    """Starts the C++ capture; returns (started, reason). Never raises."""
    global _library
    try:
        flags = (COLLECTIVES if collectives else 0) | (OPS if ops else 0)
        if not flags:
            return False, "nothing to capture (collectives=False, ops=False)"
        torch = sys.modules.get("torch")
        if torch is None:
            return False, "torch is not imported in this process"
        import moescope  # the annotation module: it reads the shim's recording flag
        if not moescope.recording():
            return False, "no moescope recording in this process (run it under `moescope record`)"
        if _library is None:
            path, reason = find_library(torch, build_when_missing=True)
            if path is None:
                return False, reason
            wanted = built_for(path)
            running = getattr(torch, "__version__", None)
            if wanted is None:
                return False, "%s has no readable %s file" % (path, VERSION_SUFFIX)
            if wanted != str(running):
                return False, ("%s was built for torch %s, this process runs torch %s: not "
                               "loaded (`python -m moescope build-capture` builds it for this "
                               "torch)" % (path, wanted, running))
            library = ctypes.CDLL(path)
            library.moescope_torch_capture_start.argtypes = [
                ctypes.c_uint, ctypes.c_char_p, ctypes.c_size_t]
            library.moescope_torch_capture_start.restype = ctypes.c_int
            library.moescope_torch_capture_stop.argtypes = []
            library.moescope_torch_capture_stop.restype = None
            library.moescope_torch_capture_built_for.argtypes = []
            library.moescope_torch_capture_built_for.restype = ctypes.c_char_p
            _library = library
        reason = ctypes.create_string_buffer(512)
        if _library.moescope_torch_capture_start(flags, reason, len(reason)) != 0:
            return False, reason.value.decode("utf-8", "replace")
        what = " and ".join(name for flag, name in ((COLLECTIVES, "collectives"),
                                                     (OPS, "operators")) if flags & flag)
        return True, "capturing %s (torch %s)" % (what, torch.__version__)
    except Exception as error:  # the program must run on whatever went wrong here
        return False, "torch capture not started: %s" % error


def stop():
    """Stops the C++ capture (hooks removed); a no-op when it was not started."""
    if _library is not None:
        _library.moescope_torch_capture_stop()
