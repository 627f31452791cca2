"""The pip route for a PyTorch user: moescope's wheel installed into a new virtual environment
that has torch, then

1. `import moescope; moescope.step(...)` outside a recording: runs, and says once that nothing is
   recorded;
2. a first recording (no C++ capture built for this torch yet) goes on without it: it starts
   the build in the background, says so on stderr, and the report's capture gaps say that DDP's
   gradient buckets were not captured;
3. `python -m moescope build-capture` waits for that build (one build: the lock) and reports
   where the library is, in the cache keyed by torch version and C++ ABI;
4. a 2-rank DDP torchrun recording: each rank's trace holds DDP's gradient all-reduces, which
   only the C++ capture sees, with every parameter byte once per step.

    python wheel_torch_capture_test.py SOURCE_DIR WORK_DIR [--cmake-build-dir DIR]

Exit 77 (CTest: skipped) with the reason when this cannot run here (wheel_install_test.py).
"""
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wheel_install_test import (build_wheel, check, install_wheel, prepare,  # noqa: E402
                                remove_when_passed, run)

NOT_RECORDING = "moescope: not being recorded"
DDP_PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs",
                           "ddp_gradient_buckets.py")


def fail(text):
    sys.exit(f"FAILED: {text}")


def record_ddp(work, environment, name):
    """Records ddp_gradient_buckets.py on 2 Gloo ranks; returns (record's result, reports by
    rank, traces by rank)."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    begin = time.monotonic()
    recorded = check(run(["moescope", "record", "-o", f"{folder}/run.%r.moetrace", "--",
                          "python", "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", DDP_PROGRAM,
                          folder], env=environment, cwd=folder), f"moescope record ({name})")
    print(f"{name}: the 2-rank recording took {time.monotonic() - begin:.0f} s")
    reports = {}
    for path in glob.glob(f"{folder}/rank*.json"):
        with open(path) as report:
            found = json.load(report)
        reports[found["rank"]] = found
    traces = {rank: f"{folder}/run.{rank}.moetrace" for rank in (0, 1)}
    if sorted(reports) != [0, 1] or not all(map(os.path.exists, traces.values())):
        fail(f"{name}: expected the reports and traces of ranks 0 and 1 in {folder}: "
             f"{os.listdir(folder)}\n{recorded.stderr[-3000:]}")
    return recorded, reports, traces


def all_reduces(trace, environment):
    """The all-reduce communication ops of one trace, through `moescope export`."""
    chrome = trace + ".json"
    check(run(["moescope", "export", "-q", "--chrome", chrome, trace], env=environment),
          "moescope export")
    with open(chrome) as exported:
        events = json.load(exported)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [event for event in events if event.get("cat") == "communication"
            and event.get("args", {}).get("kind") == "all_reduce"]


def capture_gaps(traces, environment):
    report = check(run(["moescope", "report", "--format", "json", *traces], env=environment),
                   "moescope report")
    return json.loads(report.stdout).get("capture_gaps", [])


def main():
    source_dir, work, cmake_build_dir = prepare(sys.argv[1:])
    wheel = build_wheel(source_dir, work, cmake_build_dir)
    user, user_bin, environment = install_wheel(work, wheel)
    python = os.path.join(user_bin, "python")

    # 1. The annotation API outside a recording: no-ops that say so once.
    outside = check(run([python, "-c", "import moescope; moescope.step(1); moescope.step(2); "
                         "moescope.expert_load(0, [3, 1]); print(moescope.__file__)"],
                        env=environment, cwd=work), "import moescope outside a recording")
    if not outside.stdout.strip().startswith(user):
        fail(f"moescope was imported from {outside.stdout.strip()}, not the installed wheel")
    if outside.stderr.count(NOT_RECORDING) != 1:
        fail(f"expected one '{NOT_RECORDING}' line on stderr, got:\n{outside.stderr}")

    # 2. First use: no capture for this torch yet. The recording goes on and says what it missed.
    first, _, first_traces = record_ddp(work, environment, "first-use")
    if "being built" not in first.stderr and "building it" not in first.stderr:
        fail(f"the first recording did not say the capture is being built:\n{first.stderr}")
    gaps = capture_gaps(list(first_traces.values()), environment)
    if not any("DDP gradient buckets" in gap and "not captured" in gap for gap in gaps):
        fail(f"the report of the first recording does not name the missed DDP buckets: {gaps}")
    if any(all_reduces(trace, environment) for trace in first_traces.values()):
        fail("the first recording holds all-reduces although no C++ capture was running")

    # 3. The explicit command waits for the background build (or builds, if it came first).
    begin = time.monotonic()
    built = check(run([python, "-m", "moescope", "build-capture"], env=environment, cwd=work),
                  "python -m moescope build-capture")
    library = built.stdout.strip()
    print(f"build-capture returned after {time.monotonic() - begin:.0f} s: {library}")
    print(built.stderr[-1000:])
    import_abi = check(run([python, "-c", "import torch; print(torch.__version__, "
                            "int(torch._C._GLIBCXX_USE_CXX11_ABI))"], env=environment),
                       "torch version").stdout.split()
    expected = os.path.join(environment["MOESCOPE_CACHE_DIR"],
                            f"torch-{import_abi[0]}-cxx11abi{import_abi[1]}",
                            "libmoescope_torch_capture.so")
    if library != expected or not os.path.isfile(library):
        fail(f"build-capture gave {library!r}, expected {expected}")
    with open(os.path.join(os.path.dirname(library), "build.log")) as log:
        compiled = log.read().count(" -MMD -MF ")  # one per compile (torch's ninja rule)
    if compiled != 5:  # the five translation units, compiled once: one build for all processes
        fail(f"expected one build of 5 translation units, build.log shows {compiled} compiles")

    # 4. With the capture: DDP's bucket all-reduces on both ranks, every parameter byte per step.
    second, reports, traces = record_ddp(work, environment, "with-capture")
    for rank, trace in traces.items():
        ops = all_reduces(trace, environment)
        expected_bytes = reports[rank]["steps"] * reports[rank]["param_bytes"]
        found_bytes = sum(op["args"]["bytes"] for op in ops)
        print(f"rank {rank}: {len(ops)} all-reduces, {found_bytes} bytes "
              f"(DDP: {reports[rank]['steps']} steps x {reports[rank]['param_bytes']} bytes)")
        if len(ops) < reports[rank]["steps"] or found_bytes != expected_bytes:
            fail(f"rank {rank}: expected DDP's all-reduces of {expected_bytes} bytes in all, "
                 f"found {len(ops)} of {found_bytes} bytes\n{second.stderr[-3000:]}")
        if any(op["args"]["num_ranks"] != 2 for op in ops):
            fail(f"rank {rank}: an all-reduce not over 2 ranks: {ops}")
    gaps = capture_gaps(list(traces.values()), environment)
    if any("DDP gradient buckets" in gap for gap in gaps):
        fail(f"the recording with the capture still reports the DDP gap: {gaps}")
    print("OK: the pip-installed moescope built its C++ capture for this torch and recorded "
          "DDP's gradient all-reduces")
    remove_when_passed(work, cmake_build_dir)  # the last of the two tests on that build


if __name__ == "__main__":
    main()
