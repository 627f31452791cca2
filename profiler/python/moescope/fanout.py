"""Write rank summaries for many traces at once on a Dask cluster.

``moescope record`` already writes each rank's summary beside its trace when the job ends.
Traces without one (a killed job, traces from older versions, ``record --no-summary``) get it
from ``moescope summarize TRACE``, which reads one file and writes one file, so a job's traces
fan out over any pool of machines that see them. Where a Dask cluster is at hand (as for
Nsight Systems' multi-report recipes)::

    from dask.distributed import Client
    import moescope.fanout

    client = Client("scheduler:8786")          # or None: the current client, else a local one
    results = moescope.fanout.summarize(glob.glob("/shared/run42/run.*.moetrace"), client)
    for result in results:
        if not result.ok:
            print(result.trace, result.error)
    # then: moescope report /shared/run42/run.*.moesummary

Each file is one task: the worker runs ``moescope summarize -q TRACE`` (the ``moescope`` on the
worker's PATH unless ``moescope=`` names another), so workers need the moescope command and the
traces at the same paths (a shared file system), not this Python package. Without Dask the same
fan-out is ``ls run.*.moetrace | xargs -P 16 -n 64 moescope summarize -q`` or ``srun``.

``dask.distributed`` is an optional dependency (``pip install "dask[distributed]"``); importing
this module works without it, and ``summarize`` says what to install.
"""

import os
import subprocess
from dataclasses import dataclass

__all__ = ["SummaryResult", "summarize"]

_INSTALL_HINT = ('moescope.fanout.summarize needs dask.distributed: pip install "dask[distributed]" '
                 '(or fan out without it: ls run.*.moetrace | xargs -P 16 -n 64 moescope summarize -q)')


@dataclass
class SummaryResult:
    """What became of one trace: ``ok`` with ``summary`` written, else ``error`` says why."""

    trace: str
    summary: str  # where the summary is (or would have been) written
    ok: bool
    error: str = ""


def _summary_path(trace):
    """run.3.moetrace -> run.3.moesummary; any other name gets the extension appended (as the
    command does, rank_summary.h)."""
    stem = trace[:-len(".moetrace")] if trace.endswith(".moetrace") else trace
    return stem + ".moesummary"


def _distributed():
    try:
        import distributed  # noqa: PLC0415 - optional dependency, imported when used
    except ImportError as error:
        raise ImportError(_INSTALL_HINT) from error
    return distributed


def _result_of(trace, future):
    """The SummaryResult of one finished task (a CompletedProcess, or the exception it raised
    on the worker: no moescope there, a timeout, a worker that died)."""
    summary = _summary_path(trace)
    try:
        done = future.result()
    except Exception as error:  # noqa: BLE001 - every task failure becomes that file's error
        return SummaryResult(trace, summary, False, f"{type(error).__name__}: {error}")
    if done.returncode == 0:
        return SummaryResult(trace, summary, True)
    prefix = "moescope summarize: "
    lines = [line[len(prefix):] if line.startswith(prefix) else line
             for line in (done.stderr or "").splitlines() if line.strip()]
    why = "; ".join(lines) or f"moescope summarize exited with status {done.returncode}"
    return SummaryResult(trace, summary, False, why)


def summarize(paths, client=None, moescope="moescope", timeout=None):
    """Writes the summary of every trace in ``paths`` beside it, one Dask task per file.

    paths:    trace files (.moetrace, Kineto .json[.gz]), as the workers see them.
    client:   a ``distributed.Client``; None: the current default client, else a LocalCluster
              made for this call (threads of this process; each task runs a subprocess).
    moescope: the command the workers run (a name on their PATH, or a path).
    timeout:  seconds one file may take (None: no limit); a file past it gets an error.

    Returns one SummaryResult per path, in the order given; a file that could not be
    summarized has ``ok`` False and the reason in ``error`` (nothing is raised for it).
    Raises ImportError (naming what to install) when dask.distributed is missing.
    """
    traces = [os.fspath(path) for path in paths]
    distributed = _distributed()
    own_client = None
    if client is None:
        try:
            client = distributed.default_client()
        except ValueError:  # no client yet: a local cluster for this call only
            own_client = distributed.Client(processes=False, threads_per_worker=os.cpu_count() or 1,
                                            n_workers=1, dashboard_address=None)
            client = own_client
    try:
        futures = [client.submit(subprocess.run, [moescope, "summarize", "-q", trace],
                                 capture_output=True, text=True, timeout=timeout,
                                 stdin=subprocess.DEVNULL, pure=False)
                   for trace in traces]
        distributed.wait(futures)
        return [_result_of(trace, future) for trace, future in zip(traces, futures)]
    finally:
        if own_client is not None:
            own_client.close()
