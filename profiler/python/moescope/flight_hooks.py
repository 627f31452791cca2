"""The flight recorder's Python triggers (`moescope record --flight-recorder`, see
docs/flight-recorder.md): an uncaught exception (on the main thread or any other) makes the
process write its ring and the whole job dump with it; a c10d timeout is told apart as a
collective timeout. Also registers faulthandler on SIGUSR2 into the run folder, so the shim can
put every Python thread's stack into a dump, even while the interpreter is stuck in C code.

Nothing here changes what the program does: the previous hooks run as before."""

import ctypes
import os
import sys
import threading

from . import _recorder

# enum moescope_trigger_reason
TRIGGER_EXCEPTION = 4
TRIGGER_COLLECTIVE_TIMEOUT = 6

_installed = []


def _is_collective_timeout(error):
    """c10d reports a collective that did not finish in the process group's timeout as a
    RuntimeError (Gloo: "Timed out waiting ... for recv", NCCL's watchdog: "Watchdog caught
    collective operation timeout") or a DistBackendError."""
    text = str(error).lower()
    kind = type(error).__name__
    return ("timed out" in text or "timeout" in text) and (
        kind in ("DistBackendError", "DistNetworkError") or "gloo" in text or "nccl" in text
        or "collective" in text or "c10d" in text)


def _trigger(error):
    library = _recorder.library
    if library is None or not hasattr(library, "moescope_trigger"):
        return
    reason = TRIGGER_COLLECTIVE_TIMEOUT if _is_collective_timeout(error) else TRIGGER_EXCEPTION
    message = str(error).strip().splitlines()
    detail = f"{type(error).__name__}: {message[0] if message else ''}"[:500]
    info = _TriggerInfo(0, reason, int(os.environ.get("RANK", "-1") or -1), 0,
                        library.moescope_intern(detail.encode("utf-8", "replace")))
    library.moescope_trigger(ctypes.byref(info))


class _TriggerInfo(ctypes.Structure):
    """struct moescope_trigger_info."""
    _fields_ = [("time_ns", ctypes.c_uint64), ("reason", ctypes.c_uint32),
                ("origin_rank", ctypes.c_int32), ("code", ctypes.c_int32),
                ("detail", ctypes.c_uint32)]


def install():
    """Chains sys.excepthook and threading.excepthook; never raises."""
    if _installed or _recorder.library is None or not hasattr(_recorder.library, "moescope_trigger"):
        return
    _recorder.library.moescope_trigger.argtypes = [ctypes.POINTER(_TriggerInfo)]
    _recorder.library.moescope_trigger.restype = None
    previous = sys.excepthook
    previous_thread = threading.excepthook

    def excepthook(kind, error, traceback):
        if not issubclass(kind, (KeyboardInterrupt, SystemExit)):
            try:
                _trigger(error)
            except Exception:  # noqa: BLE001 - the program's own hook must still run
                pass
        previous(kind, error, traceback)

    def thread_excepthook(arguments):
        if arguments.exc_type is not SystemExit:
            try:
                _trigger(arguments.exc_value)
            except Exception:  # noqa: BLE001
                pass
        previous_thread(arguments)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    _installed.append((excepthook, thread_excepthook))
    _register_stack_dump()


def _register_stack_dump():
    """faulthandler writes every thread's stack to <run folder>/stack.<pid>.txt on SIGUSR2; the
    shim sends it when it dumps (only where that file exists, so only in Python processes)."""
    run_dir = os.environ.get("MOESCOPE_RUN_DIR")
    if not run_dir or not os.path.isdir(run_dir):
        return
    import faulthandler
    import signal
    try:
        if signal.getsignal(signal.SIGUSR2) not in (signal.SIG_DFL, None):
            return  # the program uses SIGUSR2 itself
        stack_file = open(os.path.join(run_dir, f"stack.{os.getpid()}.txt"), "w")  # noqa: SIM115
        faulthandler.register(signal.SIGUSR2, file=stack_file, all_threads=True, chain=False)
        _installed.append(stack_file)
    except (OSError, ValueError, RuntimeError):
        pass
