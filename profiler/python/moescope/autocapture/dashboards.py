"""Live MoE health scalars into the program's own TensorBoard / W&B run, and into
``moescope record --metrics`` sinks (``moescope.live_metrics``, docs/metrics.md).

Installed by the zero-code capture. It wraps, once the program imports them (never importing
them itself): torch's ``FileWriter`` (each ``SummaryWriter``'s log directory, and the global
step of everything the program logs), ``wandb.init`` (the run) and ``Run.log`` / ``Run.finish``
(the global step; the last steps before the run closes). Every wrapper calls the original first
or last exactly as given and swallows its own failures.

MOESCOPE_METRICS: "" (the program's dashboards only), "off", or comma-separated
``tensorboard:DIR`` / ``jsonl:FILE`` (also written; with RANK set, DIR/rank<R> and FILE with
``%r`` replaced by the rank). MOESCOPE_METRICS_DETAIL=1 adds per-expert shares.
"""

import functools
import os

from .. import live_metrics
from . import after_import, warn

_live = []


def current():
    """The process's LiveMetrics, or None when metrics are off."""
    return _live[0] if _live else None


def install(step_tracker, environ=os.environ):
    spec = environ.get("MOESCOPE_METRICS", "").strip()
    if spec == "off":
        return None
    rank = int(environ.get("RANK", "-1") or -1)
    live = live_metrics.LiveMetrics(detail=environ.get("MOESCOPE_METRICS_DETAIL", "0") == "1",
                                    rank=rank)
    live.current_step = lambda: (step_tracker.next_step if step_tracker.in_step
                                 else step_tracker.next_step - 1)
    _live.append(live)
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        kind, _, where = entry.partition(":")
        if kind == "tensorboard" and where:
            directory = os.path.join(where, f"rank{rank}") if rank >= 0 else where
            live.add_sink(("tb", os.path.abspath(directory)),
                          lambda d=directory: live_metrics.TensorBoardSink(d), global_steps=False)
        elif kind == "jsonl" and where:
            path = where.replace("%r", str(max(rank, 0)))
            live.add_sink(("jsonl", os.path.abspath(path)),
                          lambda p=path: live_metrics.JsonlSink(p, rank))
        else:
            warn(f"ignoring --metrics {entry!r} (expected tensorboard:DIR or jsonl:FILE)")
    after_import("torch.utils.tensorboard.writer", lambda module: _wrap_file_writer(module, live))
    after_import("wandb", lambda module: _wrap_wandb(module, live))
    return live


def _wrap_file_writer(module, live):
    file_writer = module.FileWriter
    original_init, original_add_event = file_writer.__init__, file_writer.add_event

    @functools.wraps(original_init)
    def __init__(writer, *args, **kwargs):
        original_init(writer, *args, **kwargs)
        try:
            log_dir = writer.get_logdir()
            live.add_sink(("tb", os.path.abspath(log_dir)),
                          lambda: live_metrics.TensorBoardSink(log_dir))
        except Exception as error:  # noqa: BLE001 - the program must run on
            warn(f"metrics: SummaryWriter not followed: {type(error).__name__}: {error}")

    @functools.wraps(original_add_event)
    def add_event(writer, event, step=None, walltime=None):
        try:
            live.on_program_step(step)
        except Exception:  # noqa: BLE001
            pass
        return original_add_event(writer, event, step, walltime)

    file_writer.__init__, file_writer.add_event = __init__, add_event


def _wrap_wandb(module, live):
    """wandb.init gives the run; Run.log is wrapped on the class at import, before any run
    binds it (``wandb.log`` is the run's bound method)."""
    from wandb.sdk import wandb_run

    run_class = wandb_run.Run
    sinks = {}  # id(run) -> WandbSink
    original_init, original_log, original_finish = module.init, run_class.log, run_class.finish

    @functools.wraps(original_init)
    def init(*args, **kwargs):
        run = original_init(*args, **kwargs)
        try:
            sink = live_metrics.WandbSink(run)
            sinks[id(run)] = sink
            live.add_sink(("wandb", id(run)), lambda: sink)
        except Exception as error:  # noqa: BLE001 - the program must run on
            warn(f"metrics: wandb run not followed: {type(error).__name__}: {error}")
        return run

    @functools.wraps(original_log)
    def log(self, data, step=None, commit=None, *args, **kwargs):
        sink = sinks.get(id(self))
        if sink is not None:
            try:
                live.on_program_step(step if step is not None else self.step)
                data = sink.merged_into(data)
            except Exception:  # noqa: BLE001
                pass
        return original_log(self, data, step, commit, *args, **kwargs)

    @functools.wraps(original_finish)
    def finish(self, *args, **kwargs):
        sink = sinks.pop(id(self), None)
        if sink is not None:
            try:
                live.publish(final=True)
                for row in sink.take_all():
                    original_log(self, row, step=self.step + 1)
            except Exception as error:  # noqa: BLE001
                warn(f"metrics: the last steps did not reach wandb: {type(error).__name__}: "
                     f"{error}")
        return original_finish(self, *args, **kwargs)

    module.init, run_class.log, run_class.finish = init, log, finish
