"""The Python runtime under `moescope record`, with no call to the recorder: a 2-rank torchrun
(Gloo) training of a swapped Qwen3-MoE with ExpertBalancer writes what the C++ layer writes
(phase spans, expert load per layer and rank, all-to-all ops with byte splits) and the
balancer's rebalance decisions and collectives, which `moescope report` reads back."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

TEARDOWN_ABORT = "terminate called without an active exception"
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "..", "bench", "python_runtime", "hf_ep_train.py")


def test_two_rank_training_reaches_the_trace():
    cli = os.environ.get("MOESCOPE_CLI")
    if not cli or not os.path.exists(cli):
        pytest.skip("MOESCOPE_CLI (the moescope command) not set")
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable),
                                                        "torchrun")
    with tempfile.TemporaryDirectory() as scratch:
        command = [cli, "record", "-o", os.path.join(scratch, "run.%r.moetrace"), "--",
                   torchrun, "--standalone", "--nproc_per_node", "2", TRAIN,
                   "--steps", "24", "--interval", "4", "--balancer", "1", "--rule", "imbalance",
                   "--summary", os.path.join(scratch, "summary.json")]
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        done = subprocess.run(command, capture_output=True, text=True, timeout=500, env=env)
        if done.returncode != 0 and TEARDOWN_ABORT in done.stderr:
            # torch's Gloo teardown sometimes aborts a rank at exit, with or without moescope
            # (about 1 run in 10 here): that abort, and only that, earns one more run.
            print(f"note: a rank aborted in torch's teardown ({TEARDOWN_ABORT!r}); once more")
            done = subprocess.run(command, capture_output=True, text=True, timeout=500, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        traces = sorted(glob.glob(os.path.join(scratch, "run.[01].moetrace")))
        assert len(traces) == 2, os.listdir(scratch)
        report = subprocess.run([cli, "report", "--format", "json", "-q"] + traces,
                                capture_output=True, text=True, timeout=300)
        assert report.returncode == 0, report.stderr[-3000:]
        data = json.loads(report.stdout)
        summary = json.load(open(os.path.join(scratch, "summary.json")))
    assert data["summary"]["ranks"] == 2
    assert data["summary"]["steps"] >= 20, data["summary"]
    layers = {entry["layer"]: entry for entry in data["expert_load"]}
    assert set(layers) == {0, 1}, list(layers)
    for entry in layers.values():
        assert sum(entry["tokens"]) > 0 and len(entry["tokens"]) == 8
        assert {r["rank"] for r in entry["by_rank"]} == {0, 1}
    rebalances = data["rebalances"]
    print("rebalances:", json.dumps(rebalances)[:2000])
    assert rebalances["decisions"] > 0 and rebalances["applied"] > 0, rebalances
    assert rebalances["bytes_moved"] > 0, rebalances
    assert summary["applied_rebalances"] > 0
    # The balancer adds one collective per optimizer step whatever the layer count: both
    # layers' replica gradients, the router biases' loads and the rebalancer's sums together
    # (ar.replica_sync is only each layer's copy of its replicas' weights at construction).
    ops = {op["name"]: op for op in data["communication"]["ops"]}
    assert "ar.balancer_step" in ops, sorted(ops)
    assert not {"ar.expert_bias_load", "ar.rebalance_loads"} & set(ops), sorted(ops)
    steps, ranks, layers = 24, 2, 2
    assert ops["ar.balancer_step"]["count"] == steps * ranks, ops["ar.balancer_step"]
    assert ops["ar.replica_sync"]["count"] == layers * ranks, ops["ar.replica_sync"]
    all_to_all = data["communication"]["all_to_all"]
    assert all_to_all and sum(sum(row) for c in all_to_all for row in c["bytes"]) > 0, all_to_all
