"""The flight recorder and capture windows end to end (label `flight`): real PyTorch programs
under `moescope record`, run by torchrun on Gloo (CPU), checked against what they did.

  hang_2_ranks, hang_4_ranks   rank 1 sleeps before its 6th all_reduce: every rank dumps within
                               --hang-timeout + 5 s, and the report names rank 1 and all_reduce #5
  raise                        rank 1 raises: both ranks dump, the report names the exception
  segv                         rank 1 dies of SIGSEGV in a ctypes call: its dump (written from the
                               signal handler) is readable, rank 0 dumps as its peer
  dump_command                 `moescope dump` finds the running job without pids; both ranks dump
  steps_window                 --steps 100:110 of a 300-step run holds exactly those steps
  ranks                        --ranks 1: rank 0 runs without the shim, only rank 1 is recorded

Exit 0: pass, 1: fail, 77: skipped (the reason on stdout)."""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compat"))
from compat_harness import Failure, once_more_on_teardown_abort  # noqa: E402

SKIP = 77
HANG_TIMEOUT = 3.0


class Context:
    def __init__(self, args):
        self.moescope = args.moescope
        self.programs = args.programs
        self.work = args.work
        shutil.rmtree(self.work, ignore_errors=True)
        self.traces = os.path.join(self.work, "traces")
        os.makedirs(self.traces)
        self.env = dict(os.environ)
        # Run folders of this test only: `moescope dump` must not find another test's run.
        self.env["MOESCOPE_RUNS_DIR"] = os.path.join(self.work, "runs")
        self.env.setdefault("OMP_NUM_THREADS", "1")

    def program(self, name):
        return os.path.join(self.programs, name)

    def torchrun(self, ranks, program, *arguments):
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={ranks}", "--monitor-interval=0.2", self.program(program),
                *arguments]

    def record(self, record_args, command):
        return [self.moescope, "record", "-o", os.path.join(self.traces, "run.%r.moetrace"),
                *record_args, "--", *command]


class TimedRun:
    """Runs a command, keeping each stdout/stderr line with the time it arrived."""

    def __init__(self, command, env, timeout):
        self.lines = []  # (monotonic time, text)
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.timeout = timeout
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait(self):
        try:
            self.process.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise Failure(f"timed out after {self.timeout} s:\n{self.text()}")
        self.reader.join(timeout=10)
        return self.process.returncode

    def first_time(self, needle):
        for moment, text in self.lines:
            if needle in text:
                return moment
        return None

    def text(self):
        return "\n".join(text for _, text in self.lines)


def dumps(context):
    return sorted(glob.glob(os.path.join(context.traces, "*.moetrace")))


def report(context, files, form="text"):
    done = subprocess.run([context.moescope, "report", "--quiet", "--format", form, *files],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise Failure(f"moescope report failed: {done.stderr}")
    return done.stdout


def info(context, path):
    done = subprocess.run([context.moescope, "info", "--json", path], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise Failure(f"moescope info cannot read {path}: {done.stderr}")
    described = json.loads(done.stdout)
    return described[0] if isinstance(described, list) else described


def expect(condition, message):
    if not condition:
        raise Failure(message)


def what_happened(context, files):
    document = json.loads(report(context, files, "json"))
    expect("what_happened" in document, "the report has no what_happened section")
    return document["what_happened"]


def case_hang(context, ranks):
    stall_seconds = HANG_TIMEOUT + 12
    run = TimedRun(context.record(
        ["--flight-recorder", "30", "--hang-timeout", str(HANG_TIMEOUT)],
        context.torchrun(ranks, "gloo_steps.py", "--steps", "10", "--stall-rank", "1",
                         "--stall-at", "5", "--stall-seconds", str(stall_seconds))),
        context.env, timeout=240)
    written = {}  # path -> monotonic time first seen
    while run.process.poll() is None:
        for path in dumps(context):
            written.setdefault(path, time.monotonic())
        time.sleep(0.05)
    code = run.wait()
    output = run.text()
    expect(code == 0, f"the run failed ({code}):\n{output}")
    stall = run.first_time("stalls before collective 5")
    expect(stall is not None, f"rank 1 did not stall:\n{output}")
    files = [path for path in dumps(context) if ".dump" not in path]
    expect(len(files) == ranks, f"expected {ranks} dumps, found {dumps(context)}:\n{output}")
    for path in files:
        late = written.get(path, time.monotonic()) - stall
        expect(late <= HANG_TIMEOUT + 5,
               f"{os.path.basename(path)} written {late:.1f} s after the stall "
               f"(limit {HANG_TIMEOUT + 5} s)")
    what = what_happened(context, files)
    expect(what["trigger"]["reason"] == "hang", f"trigger is not a hang: {what['trigger']}")
    mismatch = [m for m in what["mismatches"] if m["never_entered"] == [1]]
    expect(mismatch, f"the report does not say rank 1 never entered a collective: "
                     f"{what['mismatches']}")
    expect(mismatch[0]["sequence"] == 5 and mismatch[0]["kind"] == "all_reduce",
           f"expected all_reduce #5, got {mismatch[0]}")
    text = report(context, files)
    expect(text.startswith("What happened"), "the text report does not start with What happened")
    expect("rank 1 never entered it" in text, f"text report:\n{text[:3000]}")
    slowest = max(written.get(path, 0) - stall for path in files)
    print(f"{ranks} ranks: every rank dumped within {slowest:.1f} s of the stall; "
          f"report: {[line for line in text.splitlines() if 'never entered' in line][0].strip()}")


def case_raise(context):
    run = TimedRun(context.record(["--flight-recorder", "30"],
                                  context.torchrun(2, "gloo_steps.py", "--raise-rank", "1")),
                   context.env, timeout=180)
    code = run.wait()
    expect(code != 0, "the run should fail")
    files = dumps(context)
    expect(len(files) >= 2, f"expected a dump per rank, found {files}:\n{run.text()}")
    what = what_happened(context, files)
    expect(what["trigger"]["reason"] == "exception" and what["trigger"]["rank"] == 1,
           f"trigger: {what['trigger']}")
    expect("RuntimeError: boom from rank 1" in what["trigger"]["detail"],
           f"the report does not name the exception: {what['trigger']}")
    ranks = sorted({r["rank"] for r in what["ranks"]})
    expect(ranks == [0, 1], f"dumps from ranks {ranks}")
    # `record` writes each dump's rank summary beside it once the job has ended.
    missing = [path for path in files
               if not os.path.isfile(path[:-len(".moetrace")] + ".moesummary")]
    expect(not missing, f"no summary beside the dumps {missing}:\n{run.text()}")
    print(f"raise: exit {code}; dumps of ranks {ranks}; trigger {what['trigger']['detail']}")


def case_segv(context):
    # Steps of 50 ms: the signal handler writes what the flush thread drained (every 100 ms).
    run = TimedRun(context.record(["--flight-recorder", "30"],
                                  context.torchrun(2, "gloo_steps.py", "--segv-rank", "1",
                                                   "--step-sleep", "0.05")),
                   context.env, timeout=180)
    code = run.wait()
    expect(code != 0, "the run should fail")
    files = dumps(context)
    crashed = [path for path in files if info(context, path)["metadata"].get("rank") == 1]
    expect(crashed, f"no dump of rank 1 in {files}:\n{run.text()}")
    described = info(context, crashed[0])
    kinds = described.get("events_per_kind", {})
    expect(kinds.get("step", 0) >= 4 and kinds.get("comm_op", 0) >= 2,
           f"rank 1's dump lacks its steps and collectives: {kinds}")
    expect(described["metadata"]["flight_recorder"].get("written_by") == "fatal signal handler",
           f"rank 1's dump was not written by the signal handler: {described['metadata']}")
    what = what_happened(context, files)
    expect(what["trigger"]["reason"] == "crash" and what["trigger"]["code"] == 11,
           f"trigger: {what['trigger']}")
    print(f"segv: rank 1's dump readable ({described.get('events')} events); "
          f"{len(files)} dump(s)")


def case_dump_command(context):
    run = TimedRun(context.record(["--flight-recorder", "10"],
                                  context.torchrun(2, "gloo_steps.py", "--steps", "400",
                                                   "--step-sleep", "0.05")),
                   context.env, timeout=240)
    deadline = time.monotonic() + 120
    while run.first_time("done") is None and time.monotonic() < deadline:
        procs = glob.glob(os.path.join(context.env["MOESCOPE_RUNS_DIR"], "*", "procs", "*.json"))
        if len([p for p in procs if not p.endswith(".tmp")]) >= 3 and dumps(context) == [] and \
                run.process.poll() is None:
            time.sleep(3)  # a few steps into the ring
            break
        time.sleep(0.2)
    asked = subprocess.run([context.moescope, "dump", "--wait", "30"], env=context.env,
                           capture_output=True, text=True, timeout=60)
    code = run.wait()
    expect(asked.returncode == 0, f"moescope dump failed: {asked.stderr}\n{run.text()}")
    printed = [line for line in asked.stdout.splitlines() if line.endswith(".moetrace")]
    expect(code == 0, f"the run failed ({code}):\n{run.text()}")
    what = what_happened(context, dumps(context))
    ranks = sorted(r["rank"] for r in what["ranks"])
    expect(ranks == [0, 1], f"dumps of ranks {ranks}; moescope dump printed {printed}")
    expect(what["trigger"]["reason"] == "signal", f"trigger: {what['trigger']}")
    print(f"dump_command: moescope dump printed {len(printed)} dump(s); ranks {ranks}")


def case_steps_window(context):
    command = [sys.executable, context.program("train_steps.py"), "--steps", "300"]
    done = subprocess.run(context.record(["--steps", "100:110"], command), env=context.env,
                          capture_output=True, text=True, timeout=300)
    expect(done.returncode == 0, f"the run failed:\n{done.stderr}")
    files = dumps(context)
    expect(len(files) == 1, f"expected one trace, found {files}")
    document = json.loads(report(context, files, "json"))
    steps = sorted({step["step"] for rank in document["breakdown"] for step in rank["steps"]})
    expect(steps == list(range(100, 111)), f"steps in the windowed trace: {steps}")
    print(f"steps_window: the trace holds steps {steps[0]}..{steps[-1]} ({len(steps)} steps)")


def case_ranks(context):
    done = subprocess.run(context.record(["--ranks", "1"],
                                         context.torchrun(2, "shim_presence.py")),
                          env=context.env, capture_output=True, text=True, timeout=180)
    expect(done.returncode == 0, f"the run failed:\n{done.stdout}\n{done.stderr}")
    expect("rank 0 shim_mapped=0 preload=False" in done.stdout,
           f"rank 0 has the shim:\n{done.stdout}")
    expect("rank 1 shim_mapped=1" in done.stdout, f"rank 1 lacks the shim:\n{done.stdout}")
    files = dumps(context)
    ranks = sorted(info(context, path)["metadata"].get("rank") for path in files)
    expect(ranks == [1], f"traces of ranks {ranks}: {files}")
    print("ranks: rank 0 ran without the shim; only rank 1 was recorded")


CASES = {
    "hang_2_ranks": lambda context: case_hang(context, 2),
    "hang_4_ranks": lambda context: case_hang(context, 4),
    "raise": case_raise,
    "segv": case_segv,
    "dump_command": case_dump_command,
    "steps_window": case_steps_window,
    "ranks": case_ranks,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--programs", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        import torch.distributed  # noqa: F401
    except ImportError as error:
        print(f"SKIP {args.case}: {error}")
        return SKIP
    try:
        once_more_on_teardown_abort(args.case, lambda: CASES[args.case](Context(args)))
    except Failure as failure:
        print(f"FAIL {args.case}: {failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
