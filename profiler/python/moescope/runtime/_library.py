"""Loads libmoescope_runtime_torch_ops.so, the runtime registered with PyTorch's dispatcher
(runtime/python_bindings/), once per process.

Looked up in this order: ``MOESCOPE_RUNTIME_OPS_LIBRARY``; an installed copy (the libdir that
``cmake --install`` recorded in ``moescope/_install_layout.py``); ``build/lib`` of the source tree
this package lives in. The library is compiled against one torch (its version is written next to
it, ``.torch_version``): another torch is refused before anything is loaded, since the C++ ABI of
LibTorch is not stable across versions.
"""

import os

import torch

LIBRARY_NAME = "libmoescope_runtime_torch_ops.so"
_loaded = []


class RuntimeUnavailable(ImportError):
    """The compiled runtime extension is missing or was built for another torch."""


def _candidates():
    if os.environ.get("MOESCOPE_RUNTIME_OPS_LIBRARY"):
        yield os.environ["MOESCOPE_RUNTIME_OPS_LIBRARY"]
        return
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # .../moescope
    try:
        from .. import _install_layout
        yield os.path.normpath(os.path.join(package, _install_layout.LIBRARY_DIR, LIBRARY_NAME))
    except ImportError:
        pass
    source_root = os.path.dirname(os.path.dirname(os.path.dirname(package)))
    yield os.path.join(source_root, "build", "lib", LIBRARY_NAME)


def load():
    """Path of the loaded library; raises RuntimeUnavailable saying what is missing."""
    if _loaded:
        return _loaded[0]
    tried = []
    for path in _candidates():
        if not os.path.exists(path):
            tried.append(path)
            continue
        version_file = path + ".torch_version"
        built_for = open(version_file).read().strip() if os.path.exists(version_file) else None
        if built_for is not None and built_for != torch.__version__:
            raise RuntimeUnavailable(
                f"{path} was built for torch {built_for}, this process runs torch "
                f"{torch.__version__}: rebuild moescope's runtime against this torch "
                "(cmake with MOESCOPE_PYTHON pointing at this interpreter)")
        torch.ops.load_library(path)
        _loaded.append(path)
        return path
    raise RuntimeUnavailable(
        "moescope.runtime needs the compiled runtime extension (" + LIBRARY_NAME + "), not found "
        "at: " + ", ".join(tried) + ". Build it with `make build` (CMake target "
        "moescope_runtime_torch_ops, needs LibTorch) or set MOESCOPE_RUNTIME_OPS_LIBRARY.")
