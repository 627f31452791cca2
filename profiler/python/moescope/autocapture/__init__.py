"""Zero-code capture of PyTorch training (docs/autocapture.md).

``moescope record`` puts a ``sitecustomize`` on ``PYTHONPATH`` that calls
:func:`install_from_environment` in every Python process of the run. Nothing happens unless the
capture shim is recording, and nothing touches torch until the program imports it; then,
right after ``import torch`` finishes:

- steps: from every ``torch.optim.Optimizer`` step, or from ``torch.profiler`` step calls when
  the program makes them, or from a marker the user names (``--step-marker``), numbered the
  same on every rank (``steps.py``);
- phases and module spans: forward, backward, optimizer; the model's repeated blocks by module
  path, e.g. ``model.layers.3.mlp`` (``modules.py``);
- collectives of ``torch.distributed``: from C++ (``torch_capture.py``, DDP's buckets included)
  when that library matches this torch, else from the Python API (``collectives.py``);
- expert load of MoE layers, from the router's output (``moe_layers.py``,
  ``expert_load_capture.py``);
- MoE health scalars, live into the program's own TensorBoard / W&B run (``dashboards.py``).

Every part is guarded: a failure is said once on stderr (``moescope: ...``), noted in the trace,
and that part stops; the program itself is never affected.
"""

import importlib.abc
import importlib.util
import os
import sys
from dataclasses import dataclass

from .. import _recorder


@dataclass
class Config:
    step_marker: str = ""    # "" (optimizer or torch.profiler), "module:NAME", "function:MOD:QUAL"
    module_depth: int = 2    # levels below a repeated block; -1: no module spans
    torch_ops: bool = False  # every ATen operator as a span (C++ capture)

    @staticmethod
    def from_environment(environ=os.environ):
        config = Config()
        config.step_marker = environ.get("MOESCOPE_STEP_MARKER", "").strip()
        try:
            config.module_depth = int(environ.get("MOESCOPE_MODULE_DEPTH", "2"))
        except ValueError:
            warn(f"ignoring MOESCOPE_MODULE_DEPTH={environ['MOESCOPE_MODULE_DEPTH']!r} "
                 "(expected an integer)")
        config.torch_ops = environ.get("MOESCOPE_TORCH_OPS", "0") not in ("", "0")
        return config


_warned = set()


def warn(text):
    """Says `text` once per process on stderr."""
    if text not in _warned:
        _warned.add(text)
        sys.stderr.write(f"moescope: {text}\n")


def note(text):
    """An instant in the trace (domain ``moescope``): what the capture did or could not do."""
    if _recorder.recording():
        _recorder.library.moescope_instant(_recorder.name("moescope"), _recorder.name(text))


class _ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls `callback(module)` right after `module_name` is first imported, by whichever code
    imports it; until then the program runs exactly as without moescope."""

    def __init__(self, module_name, callback):
        self.module_name, self.callback = module_name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)  # once: the real finders do the rest
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original, callback = spec.loader.exec_module, self.callback

        def exec_module(module):
            original(module)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(module_name, callback):
    """`callback(module)` now if `module_name` is imported already, else right after its import."""
    module = sys.modules.get(module_name)
    if module is not None:
        callback(module)
    else:
        sys.meta_path.insert(0, _ImportWatcher(module_name, callback))


def install_from_environment():
    """Called by moescope's sitecustomize in every Python process of a recorded run."""
    if os.environ.get("MOESCOPE_AUTOCAPTURE", "1") == "0":
        return
    if _recorder.library is None or not _recorder.recording():
        return
    if os.environ.get("MOESCOPE_FLIGHT"):  # the flight recorder's exception trigger
        from .. import flight_hooks
        flight_hooks.install()
    config = Config.from_environment()
    after_import("torch", lambda torch: activate(config))


_active = []  # the installed parts, kept alive for the process's life


def activate(config):
    """Installs every part against the imported torch; never raises."""
    if _active:
        return
    try:
        _activate(config)
    except Exception as error:  # noqa: BLE001 - the program must run on
        warn(f"zero-code capture is off: {type(error).__name__}: {error}")
        note(f"autocapture off: {type(error).__name__}: {error}")


def _activate(config):
    import torch

    from . import collectives, dashboards, modules, steps

    version = torch.__version__.split("+")[0]
    major_minor = tuple(int(part) for part in version.split(".")[:2])
    if major_minor < (2, 1):
        note(f"autocapture off: torch {torch.__version__} is older than 2.1 (no global "
             "optimizer and module hooks)")
        return
    step_tracker = steps.StepTracker(config)
    module_capture = modules.ModuleCapture(config, step_tracker)
    _active.extend([step_tracker, module_capture])
    try:
        step_tracker.live_metrics = module_capture.live_metrics = dashboards.install(step_tracker)
    except Exception as error:  # noqa: BLE001 - the metrics are optional, the capture is not
        warn(f"live metrics are off: {type(error).__name__}: {error}")
    step_tracker.install()
    module_capture.install()
    _active.append(collectives.install(config))
    note(f"autocapture: torch {torch.__version__}, steps from "
         f"{config.step_marker or 'optimizer steps (or torch.profiler steps)'}, module depth "
         f"{config.module_depth}")
