"""Runs one real program twice, plain and under `moescope record`, and compares the two runs.

Every case requires the same exit code and, where the program's output is deterministic, the
same stdout; then it checks the traces the recorded run left (each must load with `moescope
info`) and whatever else the case names. Cases live in compat_cases.py; CTest runs one case per
test (label `compat`). Exit 0: pass, 1: fail, 77: skipped, with the reason on stdout.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77
# torch's Gloo teardown sometimes aborts a rank at exit (std::terminate from a thread still
# joinable), with or without moescope: seen in about 1 of 5-20 plain torchrun runs on this 2-core
# machine. A failure naming this abort earns its case one more run; no other failure does.
TEARDOWN_ABORT = "terminate called without an active exception"


class Skip(Exception):
    """The case cannot run on this machine (the reason says why)."""


class Failure(Exception):
    """The recorded run differs from the plain one, or its traces are not what the case needs."""


def once_more_on_teardown_abort(name, case):
    """Runs case(); if it raises a Failure that names torch's teardown abort, runs it once more."""
    try:
        return case()
    except Failure as failure:
        if TEARDOWN_ABORT not in str(failure):
            raise
        print(f"note {name}: a rank aborted in torch's teardown ({TEARDOWN_ABORT!r}); "
              f"running the case once more")
    return case()


class Context:
    """What a case may use: the tools, its own scratch folder, the programs folder."""

    def __init__(self, args):
        self.moescope = args.moescope
        self.programs = args.programs
        self.work = args.work
        self.static_hello = args.static_hello
        self.preload_report = args.preload_report
        self.flight_recorder = args.flight_recorder
        self.trace_dir = os.path.join(self.work, "traces")
        self.env = dict(os.environ)
        # The recorded run must not find traces of an earlier session in the same place.
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.trace_dir)

    def program(self, name):
        return os.path.join(self.programs, name)


class Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_command(command, env, timeout, signal_when_ready=None):
    """Runs `command`; with `signal_when_ready`, sends that signal to the top process (as a job
    scheduler or `kill` would) once the program printed a line containing 'ready'."""
    if signal_when_ready is None:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        return Run(done.returncode, done.stdout, done.stderr)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    lines = []
    deadline = time.monotonic() + timeout
    for line in process.stdout:
        lines.append(line)
        if "ready" in line:
            break
        if time.monotonic() > deadline:
            break
    time.sleep(0.3)  # a few recorder flushes after the program said it is ready
    process.send_signal(signal_when_ready)
    rest, stderr = process.communicate(timeout=timeout)
    return Run(process.returncode, "".join(lines) + rest, stderr)


def exit_status(returncode):
    """subprocess gives -N for a child killed by signal N; a shell and moescope record say 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def info_of(context, trace):
    done = subprocess.run([context.moescope, "info", "--json", trace], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise Failure(f"moescope info cannot read {trace}: {done.stderr.strip()}")
    described = json.loads(done.stdout)  # one entry per file given
    return described[0] if isinstance(described, list) else described


def chrome_events(context, trace):
    """The trace as Chrome trace events (through `moescope export`, as a user would)."""
    out = os.path.join(context.work, os.path.basename(trace) + ".json")
    done = subprocess.run([context.moescope, "export", trace, "--chrome", out, "--quiet"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise Failure(f"moescope export cannot read {trace}: {done.stderr.strip()}")
    with open(out) as handle:
        document = json.load(handle)
    return document["traceEvents"] if isinstance(document, dict) else document


def compare(case, context, plain, recorded):
    if exit_status(plain.returncode) != exit_status(recorded.returncode):
        raise Failure(f"exit status {exit_status(plain.returncode)} plain, "
                      f"{exit_status(recorded.returncode)} recorded\n"
                      f"plain stderr:\n{plain.stderr}\nrecorded stderr:\n{recorded.stderr}")
    normalize = case.stdout
    if normalize is not None and normalize(plain.stdout) != normalize(recorded.stdout):
        raise Failure(f"stdout differs\n--- plain\n{plain.stdout}\n--- recorded\n"
                      f"{recorded.stdout}\n--- recorded stderr\n{recorded.stderr}")
    traces = sorted(glob.glob(os.path.join(context.trace_dir, "**", "*.moetrace"),
                              recursive=True))
    if case.traces == "none" and traces:
        raise Failure(f"expected no trace, found {traces}")
    if context.flight_recorder:
        # Nothing is written while a program runs well; what a trigger wrote (a killed or
        # failing program) must load. The case's checks of a full recording do not apply.
        for trace in traces:
            info_of(context, trace)
        if exit_status(recorded.returncode) == 0 and traces and case.signal_when_ready is None:
            raise Failure(f"the flight recorder wrote {traces} for a run that went well\n"
                          f"recorded stderr:\n{recorded.stderr}")
        return traces
    if case.traces == "some" and not traces:
        raise Failure(f"expected a trace, found none\nrecorded stderr:\n{recorded.stderr}")
    infos = {trace: info_of(context, trace) for trace in traces}
    if case.check:
        case.check(context, plain, recorded, infos)
    return traces


def run_case(case, context):
    case.prepare(context)
    command = case.command(context)
    env = dict(context.env, **case.env(context))
    plain = run_command(command, env, case.timeout, case.signal_when_ready)
    pattern = os.path.join(context.trace_dir, case.pattern)
    flight = ["--flight-recorder", "30"] if context.flight_recorder else []
    recorded_command = [context.moescope, "record", "-o", pattern, *case.record_args, *flight,
                        "--", *command]
    recorded = run_command(recorded_command, env, case.timeout, case.signal_when_ready)
    traces = compare(case, context, plain, recorded)
    mode = " (--flight-recorder 30)" if context.flight_recorder else ""
    print(f"compat {case.name}{mode}: {case.compares}")
    print(f"  exit status {exit_status(plain.returncode)} both; {len(traces)} trace(s) "
          f"readable")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", required=True)
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--programs", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--static-hello", default="")
    parser.add_argument("--preload-report", default="")
    parser.add_argument("--flight-recorder", action="store_true",
                        help="record with --flight-recorder 30 (nothing written unless triggered)")
    parser.add_argument("--in-mount-namespace", action="store_true",
                        help=argparse.SUPPRESS)  # set when re-run under `unshare -m`
    args = parser.parse_args()

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.modules.setdefault("compat_harness", sys.modules[__name__])  # one Skip/Failure class
    import compat_cases  # noqa: E402  (next to this file)

    cases = {case.name: case for case in compat_cases.CASES}
    if args.case not in cases:
        print(f"unknown case {args.case!r}; cases: {', '.join(sorted(cases))}")
        return 2
    case = cases[args.case]
    if case.private_mounts and not args.in_mount_namespace:
        # Mounts for this case (a tiny tmpfs) live in a namespace that dies with it.
        if shutil.which("unshare") is None or os.geteuid() != 0:
            print(f"SKIP {case.name}: needs root and unshare(1) for a private tmpfs mount")
            return SKIP
        namespace = ["unshare", "-m", "--propagation", "private"]
        probe = subprocess.run([*namespace, "true"], capture_output=True, text=True)
        if probe.returncode != 0:  # e.g. in a chroot, whose / is not a mount point
            print(f"SKIP {case.name}: no private mount namespace here: {probe.stderr.strip()}")
            return SKIP
        return subprocess.call([*namespace, sys.executable, *sys.argv, "--in-mount-namespace"])
    try:
        once_more_on_teardown_abort(case.name, lambda: run_case(case, Context(args)))
    except Skip as reason:
        print(f"SKIP {case.name}: {reason}")
        return SKIP
    except Failure as failure:
        print(f"FAIL {case.name} ({case.compares}): {failure}")
        return 1
    except subprocess.TimeoutExpired as timeout:
        print(f"FAIL {case.name}: timed out: {timeout}")
        return 1
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main())
