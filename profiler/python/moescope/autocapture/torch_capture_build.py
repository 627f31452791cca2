"""Builds moescope's C++ PyTorch capture (libmoescope_torch_capture.so) for the torch in this
Python, with ``torch.utils.cpp_extension``, into a per-user cache.

LibTorch's C++ ABI changes with every torch release, so the pip wheel ships the capture's
sources (``torch_capture_sources/`` next to this file) instead of a library built for one torch.
They are compiled once per torch version and C++ ABI, into::

    $MOESCOPE_CACHE_DIR (default $XDG_CACHE_HOME/moescope, else ~/.cache/moescope)
        torch-<torch.__version__>-cxx11abi<0|1>/
            libmoescope_torch_capture.so    (+ .torch_version, as a CMake build writes it)
            sources.sha256                  which sources it was built from
            build.lock                      held while one process builds (fcntl.flock)
            build.log, build.failed         the last build's output; why it failed

``python -m moescope build-capture`` builds it now (and waits). Under ``moescope record`` the
first recording that finds no library starts this build in a separate process and records on
without it (the trace says what that run could not see): the first process to take build.lock
hands it, locked, to the build, so the other ranks find the build under way. A failed build is not retried by recordings (``build.failed`` stays until
the explicit command or another moescope or torch version).
"""

import contextlib
import errno
import fcntl
import hashlib
import os
import shlex
import subprocess
import sys
import time

LIBRARY_NAME = "libmoescope_torch_capture.so"
_EXTENSION_NAME = "libmoescope_torch_capture"  # cpp_extension.load appends ".so"
_CAPTURE_SOURCES = ("torch_capture_api.cpp", "collective_capture.cpp", "operator_capture.cpp",
                    "collective_classification.cpp", "operator_span_names.cpp")
# Environment variables `moescope record` sets that must not reach the background build (it is
# not part of the recorded program).
_RECORD_VARIABLES = ("LD_PRELOAD", "PYTHONPATH")


class BuildUnavailable(Exception):
    """The capture cannot be built here; the message says why."""


def shipped_sources():
    """True in a pip install: the wheel ships the sources and no library (the first recording
    builds it); a CMake build has built its own library next to the shim."""
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.isdir(os.path.join(here, "torch_capture_sources"))


def source_layout():
    """(source folder, include folders, version script) of the capture's C++ sources: the copy
    the wheel installs next to this module, else profiler/ of the source tree it lives in."""
    here = os.path.dirname(os.path.realpath(__file__))
    shipped = os.path.join(here, "torch_capture_sources")
    if os.path.isdir(shipped):
        return shipped, [os.path.join(shipped, "include")], \
            os.path.join(shipped, "torch_capture_exports.map")
    profiler = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # .../profiler
    source = os.path.join(profiler, "torch_capture")
    if not os.path.isfile(os.path.join(source, "collective_capture.cpp")):
        raise BuildUnavailable("the capture's C++ sources are not installed (looked in %s and %s)"
                               % (shipped, source))
    return source, [os.path.join(source, "include"),
                    os.path.join(profiler, "recorder", "include"),
                    os.path.join(profiler, "trace", "include")], \
        os.path.join(source, "torch_capture_exports.map")


def sources_digest(source, include_dirs, version_script):
    """sha256 of every file the build reads from moescope: a changed source is a new build."""
    digest = hashlib.sha256()
    files = [os.path.join(source, name) for name in sorted(os.listdir(source))
             if name.endswith((".cpp", ".h"))]
    for folder in include_dirs:
        for root, _, names in sorted(os.walk(folder)):
            files.extend(os.path.join(root, name) for name in sorted(names))
    for path in files + [version_script]:
        digest.update(os.path.relpath(path, source).encode())
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()


def cache_root():
    explicit = os.environ.get("MOESCOPE_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "moescope")


def cache_folder(torch):
    """The cache folder of this torch version and C++ ABI."""
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return os.path.join(cache_root(), "torch-%s-cxx11abi%d" % (torch.__version__, abi))


def cached_library(torch):
    """(path, reason): the cached library built for this torch from these sources, or None and
    what is missing ("" when nothing was ever built)."""
    folder = cache_folder(torch)
    path = os.path.join(folder, LIBRARY_NAME)
    try:
        wanted = sources_digest(*source_layout())
    except (BuildUnavailable, OSError) as error:
        return None, str(error)
    if os.path.isfile(path) and _read(os.path.join(folder, "sources.sha256")) == wanted:
        return path, ""
    failed = _read(os.path.join(folder, "build.failed"))
    if failed and failed.split("\n", 1)[0] == wanted:
        return None, "its build failed (%s; log: %s)" % (
            failed.split("\n", 1)[-1].strip(), os.path.join(folder, "build.log"))
    return None, ""


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _open_lock(folder, lock_fd=None):
    """<folder>/build.lock, or the descriptor of it a recording handed over already locked."""
    if lock_fd is not None:
        return os.fdopen(lock_fd, "w")
    os.makedirs(folder, exist_ok=True)
    return open(os.path.join(folder, "build.lock"), "w")


@contextlib.contextmanager
def _build_lock(folder, wait, lock_fd=None):
    """Holds <folder>/build.lock (flock: held by the open file, so also through a descriptor
    inherited already locked); yields False when `wait` is off and another process has it."""
    with _open_lock(folder, lock_fd) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as error:
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                yield False
                return
            raise
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(force=False, wait=True, log=None, lock_fd=None):
    """Builds the library for the torch in this Python; returns its path. Raises
    BuildUnavailable saying why it could not, or when `wait` is off and another process is
    building it. `log`: a stream for progress lines (None: silent). `lock_fd`: build.lock,
    opened and locked by the recording that started this build."""
    import torch

    def say(text):
        if log is not None:
            log.write("moescope: %s\n" % text)
            log.flush()

    source, include_dirs, version_script = source_layout()
    wanted = sources_digest(source, include_dirs, version_script)
    folder = cache_folder(torch)
    library = os.path.join(folder, LIBRARY_NAME)
    with _build_lock(folder, wait, lock_fd) as locked:
        if not locked:
            raise BuildUnavailable("another process is building it (lock %s)"
                                   % os.path.join(folder, "build.lock"))
        if not force and os.path.isfile(library) and \
                _read(os.path.join(folder, "sources.sha256")) == wanted:
            say("the C++ capture for torch %s is built: %s" % (torch.__version__, library))
            return library
        # A stale library must not be loaded while its stamp says the new sources.
        for stale in (library, os.path.join(folder, "sources.sha256"),
                      os.path.join(folder, "build.failed")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
        say("building the C++ capture for torch %s (first use: a minute or two) in %s"
            % (torch.__version__, folder))
        begin = time.monotonic()
        try:
            built = _compile(torch, source, include_dirs, version_script, folder)
        except Exception as error:  # noqa: BLE001 - any failure is the answer, written down
            lines = str(error).strip().splitlines()
            reason = "%s: %s" % (type(error).__name__, lines[-1] if lines else "")
            with open(os.path.join(folder, "build.failed"), "w") as failed:
                failed.write("%s\n%s\n" % (wanted, reason))
            raise BuildUnavailable("building it for torch %s failed: %s (log: %s)" % (
                torch.__version__, reason, os.path.join(folder, "build.log"))) from error
        temporary = library + ".tmp%d" % os.getpid()
        with open(built, "rb") as source_file, open(temporary, "wb") as target:
            target.write(source_file.read())
        with open(library + ".torch_version", "w") as version_file:
            version_file.write(torch.__version__ + "\n")
        with open(os.path.join(folder, "sources.sha256"), "w") as stamp:
            stamp.write(wanted + "\n")
        os.replace(temporary, library)  # last: a loader sees the whole library or none
        say("built %s in %.0f s" % (library, time.monotonic() - begin))
        return library


def _compile(torch, source, include_dirs, version_script, folder):
    """torch.utils.cpp_extension.load in a build folder under `folder`, output to build.log."""
    from torch.utils import cpp_extension

    build_folder = os.path.join(folder, "build")
    os.makedirs(build_folder, exist_ok=True)
    # ninja from the `ninja` wheel is next to this Python, which may not be on PATH (a venv's
    # torchrun started by its full path).
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable),
                                          os.environ.get("PATH", "/usr/bin:/bin")])
    # NDEBUG: at::RecordFunction has a debug-only member, so its layout must match the release
    # torch wheel. USE_DISTRIBUTED guards the c10d headers. Hidden visibility and the version
    # script: only the C entry points leave the library (as in profiler/torch_capture's CMake).
    flags = ["-O2", "-DNDEBUG", "-DUSE_DISTRIBUTED", "-fvisibility=hidden",
             "-fvisibility-inlines-hidden",
             # ninja runs the command through the shell: the quotes must reach the compiler.
             shlex.quote('-DMOESCOPE_TORCH_CAPTURE_BUILT_FOR="%s"' % torch.__version__)]
    with open(os.path.join(folder, "build.log"), "w") as log, _output_to(log):
        return cpp_extension.load(
            name=_EXTENSION_NAME,
            sources=[os.path.join(source, name) for name in _CAPTURE_SOURCES],
            extra_cflags=flags, extra_include_paths=include_dirs,
            extra_ldflags=["-Wl,--as-needed", "-Wl,--version-script=%s" % version_script, "-ldl"],
            build_directory=build_folder, with_cuda=False, is_python_module=False,
            verbose=True)


@contextlib.contextmanager
def _output_to(log):
    """Points this process's stdout and stderr (file descriptors: ninja and the compiler write
    there) at `log` for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for descriptor in saved:
            os.close(descriptor)


def start_background_build(torch):
    """Starts `python -m moescope build-capture` for this torch in a process of its own (not
    recorded, not waited for), handing it build.lock already locked, so that every other rank
    that looks from now on finds the build under way; returns a sentence for the trace."""
    folder = cache_folder(torch)
    log_path = os.path.join(folder, "build.log")
    lock = _open_lock(folder)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            return ("another process is building it for torch %s now (first use; log: %s): "
                    "the next recording has it" % (torch.__version__, log_path))
        environment = {key: value for key, value in os.environ.items()
                       if not key.startswith("MOESCOPE_") and key not in _RECORD_VARIABLES}
        if os.environ.get("MOESCOPE_CACHE_DIR"):
            environment["MOESCOPE_CACHE_DIR"] = os.environ["MOESCOPE_CACHE_DIR"]
        # The package this module belongs to, wherever it was imported from.
        environment["PYTHONPATH"] = os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
        with open(os.path.join(folder, "background.log"), "a") as output:
            subprocess.Popen([sys.executable, "-m", "moescope", "build-capture",
                              "--lock-fd", str(lock.fileno())],
                             env=environment, stdin=subprocess.DEVNULL, stdout=output,
                             stderr=output, start_new_session=True, pass_fds=(lock.fileno(),))
    finally:
        lock.close()  # the child holds the lock from here on, through its copy
    return ("it is being built for torch %s now, in the background (first use; `python -m "
            "moescope build-capture` waits for it; log: %s): the next recording has it"
            % (torch.__version__, log_path))
