"""moescope.fanout.summarize on a Dask LocalCluster (label `analysis`): a generated 4-rank MoE
job plus a damaged and a missing file. Every readable trace gets its summary (from which
`moescope report` gives the JSON of the traces), each bad file its own error, in input order;
without a client a local cluster is made for the call; without dask the error says what to
install. Run by tests/python/run_pytest.py (CTest `analysis_fanout_dask`)."""

import os
import subprocess
import sys

import pytest

import moescope.fanout as fanout

MOESCOPE = os.environ["MOESCOPE_CLI"]
JOB_FILES = os.environ["MOESCOPE_JOB_FILES"]


@pytest.fixture()
def job(tmp_path):
    subprocess.run([JOB_FILES, str(tmp_path), "4", "12"], check=True, timeout=120)
    traces = [str(tmp_path / f"job.{rank}.moetrace") for rank in range(4)]
    damaged = tmp_path / "job.damaged.moetrace"
    damaged.write_bytes(b"not a trace at all\n" * 10)
    return traces, str(damaged), str(tmp_path / "job.missing.moetrace")


def report_json(paths, *flags):
    done = subprocess.run([MOESCOPE, "report", "-q", "--format", "json", *flags, *paths],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_local_cluster_summarizes_each_file_and_reports_each_failure(job):
    from distributed import Client, LocalCluster

    traces, damaged, missing = job
    given = [traces[0], damaged, traces[1], missing, traces[2], traces[3]]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        results = fanout.summarize(given, client, moescope=MOESCOPE, timeout=120)

    assert [result.trace for result in results] == given
    by_trace = {result.trace: result for result in results}
    for trace in traces:
        result = by_trace[trace]
        assert result.ok, result.error
        assert result.summary == trace[:-len(".moetrace")] + ".moesummary"
        assert os.path.getsize(result.summary) > 0
    assert not by_trace[damaged].ok
    assert "job.damaged.moetrace" in by_trace[damaged].error
    assert not os.path.exists(by_trace[damaged].summary)
    assert not by_trace[missing].ok
    assert "job.missing.moetrace" in by_trace[missing].error

    # The summaries the workers wrote are the job's: the report from them equals --detail's.
    from_summaries, notes = report_json(traces)
    from_traces, _ = report_json(traces, "--detail")
    assert notes == "", notes  # no rank fell back to its trace
    assert from_summaries == from_traces


def test_without_a_client_a_local_cluster_is_made_for_the_call(job):
    import distributed

    traces, _, _ = job
    with pytest.raises(ValueError):
        distributed.default_client()  # none before
    results = fanout.summarize(traces[:2], moescope=MOESCOPE, timeout=120)
    assert [result.ok for result in results] == [True, True], [r.error for r in results]
    assert all(os.path.isfile(result.summary) for result in results)
    with pytest.raises(ValueError):
        distributed.default_client()  # and none left behind: the call closed its own


def test_a_worker_without_the_command_gives_that_files_error(job):
    from distributed import Client, LocalCluster

    traces, _, _ = job
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        results = fanout.summarize(traces[:1], client, moescope="/nonexistent/moescope")
    assert not results[0].ok
    assert "FileNotFoundError" in results[0].error and "/nonexistent/moescope" in results[0].error


def test_missing_dask_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(ImportError, match=r"pip install \"dask\[distributed\]\""):
        fanout.summarize(["run.0.moetrace"])
