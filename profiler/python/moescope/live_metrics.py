"""MoE health scalars written live, from a side thread, into the dashboards a recorded program
already uses (docs/metrics.md).

The zero-code capture hands this module what it has anyway: each router's tokens per expert
(already on the host: the non-blocking copies of ``host_copies`` brought them) and each step's
end. :meth:`LiveMetrics.on_expert_load` and :meth:`LiveMetrics.on_step_end` only append a
tuple to a deque; a daemon thread turns finished steps into the per-step metric set of
``profiler/analysis/step_metrics.h`` (same names and formulas, this rank's view) and writes them

- into the log directory of every ``torch.utils.tensorboard.SummaryWriter`` the program made (a
  file of our own there, ``*.moescope``, so TensorBoard shows one run and the program's file is
  never touched), at the program's global step: the step it passed to the writer while that
  training step was in progress or just after it ended;
- into the program's ``wandb`` run, with ``moescope/step`` (the program's global step) as
  their x axis, in the rows the program commits (its step counter never moves);
- into ``moescope record --metrics tensorboard:DIR | jsonl:FILE`` (``MOESCOPE_METRICS``).

A step is written once the step after it has ended (GPU counts may land a step late); the last
ones at exit, or when the program finishes its wandb run. Nothing here raises into the
program: a failing sink is said once on stderr and dropped.
"""

import atexit
import collections
import json
import math
import os
import sys
import threading
import time

_HOT_SHARE_FACTOR = 2.0  # expert_load_analysis.h kHotShareFactor
_PUBLISH_PERIOD_S = 0.5


def _warn(text):
    sys.stderr.write(f"moescope: metrics: {text}\n")


# ---- the metric set (step_metrics.h) -----------------------------------------------------------

def _percentile(sorted_values, q):
    """numpy's linear interpolation (statistics.h percentile_of_sorted)."""
    if not sorted_values:
        return 0.0
    position = min(max(q, 0.0), 1.0) * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def layer_metrics(layer, tokens, detail=False):
    """[(name, value)] of one layer in one step from tokens per expert [num_experts]."""
    tokens = [float(t) for t in tokens]
    total = sum(tokens)
    count = len(tokens)
    mean = total / count if count else 0.0
    prefix = f"moescope/layer{layer}/"
    if mean > 0:
        std = math.sqrt(sum((t - mean) ** 2 for t in tokens) / count)
        entropy = -sum((t / total) * math.log(t / total) for t in tokens if t > 0)
        values = [max(tokens) / mean, min(tokens) / mean, std / mean, math.exp(entropy)]
    else:
        values = [0.0, 0.0, 0.0, 0.0]
    shares = [t / total if total > 0 else 0.0 for t in tokens]
    result = list(zip((prefix + name for name in ("max_over_mean", "min_over_mean", "cv",
                                                  "effective_experts")), values))
    result += [(prefix + "dead_experts", float(sum(1 for t in tokens if t <= 0))),
               (prefix + "hot_experts",
                float(sum(1 for s in shares if s > _HOT_SHARE_FACTOR / max(count, 1)))),
               (prefix + "tokens", total)]
    if detail:
        result += [(f"{prefix}expert{e}/share", s) for e, s in enumerate(shares)]
    return result


def step_metrics(loads, step_ms=None, peak_memory_bytes=None, detail=False):
    """The step's metric set from {layer: tokens per expert}, as an ordered dict."""
    values = collections.OrderedDict()
    max_over_mean, cv, dead, tokens = [], [], 0.0, 0.0
    for layer in sorted(loads):
        pairs = layer_metrics(layer, loads[layer], detail)
        values.update(pairs)
        max_over_mean.append(pairs[0][1])
        cv.append(pairs[2][1])
        dead += pairs[4][1]
        tokens += pairs[6][1]
    if max_over_mean:
        ordered = sorted(max_over_mean)
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            values[f"moescope/max_over_mean/{name}"] = _percentile(ordered, q)
        values["moescope/max_over_mean/max"] = ordered[-1]
        values["moescope/cv/max"] = max(cv)
        values["moescope/dead_experts"] = dead
        values["moescope/tokens"] = tokens
    if step_ms is not None:
        values["moescope/step_time_ms/mean"] = step_ms
        values["moescope/step_time_ms/max"] = step_ms
    if peak_memory_bytes is not None:
        values["moescope/peak_memory_bytes"] = float(peak_memory_bytes)
    return values


# ---- sinks ---------------------------------------------------------------------------------------

class TensorBoardSink:
    """An event file of our own in `log_dir` (the tensorboard package's writer)."""

    def __init__(self, log_dir):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        self.log_dir = log_dir
        self.writer = EventFileWriter(log_dir, filename_suffix=".moescope")

    def write(self, global_step, values):
        from tensorboard.compat.proto import event_pb2, summary_pb2
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=name, simple_value=value)
                                             for name, value in values.items()])
        self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(global_step),
                                              summary=summary))

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()


class JsonlSink:
    def __init__(self, path, rank):
        self.file = open(path, "a", encoding="utf-8")
        self.rank = rank

    def write(self, global_step, values, step=None):
        line = {"step": step, "global_step": global_step, "rank": self.rank, "scalars": values}
        self.file.write(json.dumps(line) + "\n")

    def flush(self):
        self.file.flush()

    def close(self):
        self.file.close()


class WandbSink:
    """The program's own wandb run. A wandb row is committed only by the program's own log
    calls (moescope never moves the run's step counter), so each of the program's next log calls
    carries one step of ours (``merged_into``), plotted against ``moescope/step``, the program's
    global step of that training step; what is left joins new rows when the program finishes the
    run."""

    def __init__(self, run):
        self.run = run
        self.rows = collections.deque(maxlen=4096)
        run.define_metric("moescope/step")
        run.define_metric("moescope/*", step_metric="moescope/step")

    def write(self, global_step, values):
        self.rows.append({"moescope/step": int(global_step), **values})

    def merged_into(self, data):
        """The program's row `data` with our oldest waiting step added (data itself untouched)."""
        if not self.rows or not isinstance(data, dict):
            return data
        return {**data, **self.rows.popleft()}

    def take_all(self):
        rows = list(self.rows)
        self.rows.clear()
        return rows

    def flush(self):
        pass

    def close(self):
        pass


# ---- the collector -------------------------------------------------------------------------------

class LiveMetrics:
    def __init__(self, detail=False, rank=-1):
        self.detail = detail
        self.rank = rank
        self.events = collections.deque()   # appended by the program's threads, read by ours
        self.loads = {}                     # step -> {layer: tokens}
        self.step_ms = {}                   # step -> ms
        self.peak_memory = {}               # step -> bytes
        self.global_steps = {}              # moescope step -> the program's global step
        self.last_ended = -1
        self.published = -1
        self.sinks = []                     # (sink, uses global steps)
        self.sink_dirs = set()
        self.lock = threading.Lock()        # sinks and publishing: side thread and exit
        self.stop = threading.Event()
        self.thread = None
        self.closed = False
        self.current_step = lambda: -1      # the step a program's log line belongs to

    # ---- called on the program's threads: an append each (nothing before a sink exists) ----

    def on_expert_load(self, step, layer, values):
        if step >= 0 and self.thread is not None:
            self.events.append(("load", int(step), int(layer), values))

    def on_step_end(self, step, seconds, peak_memory_bytes=None):
        if self.thread is not None:
            self.events.append(("end", int(step), seconds * 1e3, peak_memory_bytes))

    def on_program_step(self, global_step):
        """The program logged at `global_step`: that is the current training step's."""
        if global_step is not None and self.thread is not None:
            self.events.append(("global", self.current_step(), int(global_step)))

    def add_sink(self, key, make_sink, global_steps=True):
        """Adds make_sink() (once per key) on the side thread's next pass."""
        self.events.append(("sink", key, make_sink, global_steps))
        self.start()

    # ---- the side thread ----

    def start(self):
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="moescope-metrics", daemon=True)
            self.thread.start()
            atexit.register(self.close)

    def _run(self):
        while not self.stop.wait(_PUBLISH_PERIOD_S):
            self.publish(final=False)

    def _drain(self):
        while self.events:
            event = self.events.popleft()
            kind = event[0]
            if kind == "load":
                self.loads.setdefault(event[1], {})[event[2]] = event[3]
            elif kind == "end":
                self.step_ms[event[1]] = event[2]
                if event[3] is not None:
                    self.peak_memory[event[1]] = event[3]
                self.last_ended = max(self.last_ended, event[1])
            elif kind == "global":
                if event[1] >= 0:
                    self.global_steps.setdefault(event[1], event[2])
            elif kind == "sink" and event[1] not in self.sink_dirs:
                self.sink_dirs.add(event[1])
                try:
                    self.sinks.append((event[2](), event[3]))
                except Exception as error:  # noqa: BLE001 - the program must run on
                    _warn(f"cannot write to {event[1]}: {type(error).__name__}: {error}")

    def _global_step(self, step):
        """The program's global step of `step`: logged, else shifted like the last one logged."""
        if step in self.global_steps:
            return self.global_steps[step]
        earlier = [known for known in self.global_steps if known < step]
        if earlier:
            known = max(earlier)
            return self.global_steps[known] + (step - known)
        return step

    def publish(self, final):
        with self.lock:
            if self.closed:
                return
            try:
                self._drain()
                # A step is done when the next one ended, or (steps the program numbers
                # itself, with no step ends seen here) when two later steps have loads.
                last = max(self.loads.keys() | self.step_ms.keys(), default=-1) if final \
                    else max(self.last_ended - 1, max(self.loads, default=-1) - 2)
                steps = sorted(s for s in self.loads.keys() | self.step_ms.keys()
                               if self.published < s <= last)
                for step in steps:
                    values = step_metrics(self.loads.pop(step, {}), self.step_ms.pop(step, None),
                                          self.peak_memory.pop(step, None), self.detail)
                    self._write(step, values)
                    self.published = step
                # Only the latest published mapping is still needed (to shift later steps).
                done = [s for s in self.global_steps if s <= self.published]
                for known in sorted(done)[:-1]:
                    del self.global_steps[known]
                for sink, _ in self.sinks:
                    sink.flush()
            except Exception as error:  # noqa: BLE001
                _warn(f"{type(error).__name__}: {error}")

    def _write(self, step, values):
        for entry in list(self.sinks):
            sink, uses_global = entry
            try:
                if isinstance(sink, JsonlSink):
                    sink.write(self._global_step(step), values, step=step)
                else:
                    sink.write(self._global_step(step) if uses_global else step, values)
            except Exception as error:  # noqa: BLE001
                _warn(f"dropping a sink: {type(error).__name__}: {error}")
                self.sinks.remove(entry)

    def close(self):
        """At exit: stops the side thread, writes what is left and closes the sinks (once)."""
        if self.closed:
            return
        self.stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=2.0)
        self.publish(final=True)
        with self.lock:
            self.closed = True
            for sink, _ in self.sinks:
                try:
                    sink.close()
                except Exception:  # noqa: BLE001
                    pass
