"""The flight recorder's cost and bounds, measured in one run (docs/flight-recorder.md; numbers
in docs/performance.md):

  1. cost per step: tests/flight/programs/train_steps.py (a small CPU training loop) with no
     recording, with plain recording (`moescope record`) and with the flight recorder
     (`--flight-recorder 30`), interleaved, --rounds times each; median of the runs' median step.
  2. memory: a generator of spans at the recorder's peak rate from Python (one thread calling
     moescope_span_complete through ctypes, as fast as it can) under `--flight-recorder 3600
     --flight-recorder-size CAP` for --seconds; the process's RSS sampled every second, against
     the same generator without recording.
  3. time to dump: `moescope dump` on that generator once the ring is full; the shim's own
     measure of the write (printed on stderr) and the dump's size.

  python3 bench/flight_recorder_bench.py --moescope build/bin/moescope [--rounds 5]
      [--seconds 120] [--cap 64M]
"""

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "tests", "flight", "programs", "train_steps.py")

GENERATOR = r"""
import ctypes, os, sys, time
lib = ctypes.CDLL(None)
span = lib.moescope_span_complete if hasattr(lib, "moescope_span_complete") else None
if span is not None:
    span.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]
    name = lib.moescope_intern(b"bench.span")
    step = lib.moescope_step
    step.argtypes = [ctypes.c_int64]
deadline = time.monotonic() + float(sys.argv[1])
count = 0
print("ready", flush=True)
t = 1
while time.monotonic() < deadline:
    for _ in range(10000):
        if span is not None:
            span(0, name, t, t + 5)
        t += 10
    count += 10000
    if span is not None and count % 1000000 == 0:
        step(count // 1000000)
print(f"events {count}", flush=True)
"""


def median_step_us(command, env):
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr}")
    return float(re.search(r"median_step_us ([0-9.]+)", done.stdout).group(1))


def rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def python_child(record_pid):
    """The python process under `moescope record` (its only child)."""
    for _ in range(100):
        try:
            with open(f"/proc/{record_pid}/task/{record_pid}/children") as children:
                pids = children.read().split()
            if pids:
                return int(pids[0])
        except OSError:
            pass
        time.sleep(0.05)
    return None


def run_generator(command, env, seconds, work, dump_after=None, moescope=None):
    """Runs the generator, sampling RSS each second; optionally runs `moescope dump` after
    `dump_after` seconds. Returns (max RSS MB, samples, stderr, events)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    pid = python_child(process.pid) if command[0].endswith("moescope") else process.pid
    samples = []
    began = time.monotonic()
    dumped = None
    while process.poll() is None:
        value = rss_mb(pid) if pid else None
        if value is not None:
            samples.append(value)
        if dump_after is not None and dumped is None and time.monotonic() - began > dump_after:
            dumped = subprocess.run([moescope, "dump", "--wait", "60"], env=env,
                                    capture_output=True, text=True, timeout=120)
        time.sleep(1.0)
    stdout, stderr = process.communicate()
    events = int(re.search(r"events (\d+)", stdout).group(1))
    return (max(samples) if samples else 0.0), samples, stderr, events


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--rounds", type=int, default=5, help="0: skip the cost per step")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--baseline-seconds", type=float, default=None,
                        help="the unrecorded generator's run (default: --seconds; its RSS is flat "
                             "after a few seconds, so a long memory run can keep this short)")
    parser.add_argument("--cap", default="64M")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="flight-bench-")
    env = dict(os.environ, OMP_NUM_THREADS="1", MOESCOPE_RUNS_DIR=os.path.join(work, "runs"))
    trace = os.path.join(work, "run.%r.moetrace")

    # 1. cost per step, interleaved.
    train = [sys.executable, TRAIN, "--steps", str(args.steps), "--quiet"]
    ways = {
        "none": train,
        "plain recording": [args.moescope, "record", "-o", trace, "--", *train],
        "flight recorder": [args.moescope, "record", "-o", trace, "--flight-recorder", "30",
                            "--", *train],
    }
    results = {way: [] for way in ways}
    for _ in range(args.rounds):
        for way, command in ways.items():
            results[way].append(median_step_us(command, env))
    base = statistics.median(results["none"]) if args.rounds else 0
    if args.rounds:
        print(f"cost per step ({args.rounds} interleaved runs of {args.steps} steps each, median "
              f"of medians):")
    for way, values in results.items() if args.rounds else []:
        value = statistics.median(values)
        print(f"  {way:16s} {value:8.1f} us/step  ({value / base:.3f} x none)  runs: "
              f"{', '.join(f'{v:.0f}' for v in values)}")

    # 2. + 3. memory at the peak rate and the time to dump.
    baseline_seconds = args.seconds if args.baseline_seconds is None else args.baseline_seconds
    baseline = [sys.executable, "-c", GENERATOR, str(baseline_seconds)]
    baseline_rss, _, _, baseline_events = run_generator(baseline, env, baseline_seconds, work)
    generator = [sys.executable, "-c", GENERATOR, str(args.seconds)]
    flight = [args.moescope, "record", "-o", trace, "--flight-recorder", "3600",
              "--flight-recorder-size", args.cap, "--", *generator]
    max_rss, samples, stderr, events = run_generator(
        flight, env, args.seconds, work, dump_after=args.seconds * 0.75, moescope=args.moescope)
    rate = events / args.seconds
    print(f"memory: {args.seconds:.0f} s of spans at {rate / 1e6:.2f} M events/s "
          f"({events} events, ~{events * 32 / 1e6:.0f} MB of records):")
    print(f"  RSS without recording {baseline_rss:.0f} MB; with --flight-recorder-size "
          f"{args.cap}: max {max_rss:.0f} MB (+{max_rss - baseline_rss:.0f} MB), last "
          f"{samples[-1] if samples else 0:.0f} MB; samples every 1 s: "
          f"{', '.join(f'{s:.0f}' for s in samples[::max(1, len(samples) // 12)])}")
    wrote = re.findall(r"wrote (\S+) \(([0-9.]+) MB of ring in ([0-9]+) ms\)", stderr)
    for path, megabytes, milliseconds in wrote:
        size = os.path.getsize(path) / 1e6 if os.path.exists(path) else 0
        print(f"time to dump: {megabytes} MB of ring in {milliseconds} ms "
              f"({size:.1f} MB file, zstd)")
    if not wrote:
        print(f"no dump line in the shim's stderr:\n{stderr[-2000:]}")
    for path in glob.glob(os.path.join(work, "*.moetrace")):
        os.unlink(path)


if __name__ == "__main__":
    main()
