"""The compatibility cases: real programs nobody here wrote (PyTorch, torchrun, numpy, make, the
shell, libc's static linking, setuid, jemalloc), each run plain and under `moescope record`.

A case names what it compares (`compares`); compat_harness.py does the runs and the common
checks (exit status, stdout, every trace loads) and then calls the case's own `check`.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from compat_harness import Failure, Skip, chrome_events

PYTHON = sys.executable


def exact(text):
    return text


def rank_reports(text):
    """The ranks' report lines, order-free. Two ranks print to one pipe, so a line of one can be
    cut into by the other's (seen: "...]]rank 0/2 ..." then an empty line): found by pattern."""
    return sorted(re.findall(r"rank \d+/\d+ local \d+ sum \[[^\]]*\] gathered \[\[.*?\]\]", text))


def nothing(context):
    return None


def no_env(context):
    return {}


@dataclass
class Case:
    name: str
    compares: str
    command: Callable
    stdout: Optional[Callable] = exact  # None: output is not deterministic, not compared
    traces: str = "some"                # some | none | any
    pattern: str = "run.%r.moetrace"
    record_args: List[str] = field(default_factory=list)
    env: Callable = no_env
    prepare: Callable = nothing
    check: Optional[Callable] = None
    signal_when_ready: Optional[int] = None
    private_mounts: bool = False
    timeout: int = 180


def needs_module(name):
    def prepare(context):
        try:
            __import__(name)
        except ImportError as error:
            raise Skip(f"python module {name} is missing ({error}); scripts/setup.sh installs it")
    return prepare


def instants_named(context, infos, prefix):
    names = []
    for trace in infos:
        names += [event.get("name", "") for event in chrome_events(context, trace)
                  if event.get("ph") in ("i", "I") and event.get("name", "").startswith(prefix)]
    return names


def capture_metadata(infos):
    return [info.get("metadata", {}).get("capture", {}) for info in infos.values()]


def one_info(infos):
    if len(infos) != 1:
        raise Failure(f"expected one trace, found {len(infos)}: {sorted(infos)}")
    return next(iter(infos.values()))


# ---- checks ------------------------------------------------------------------------------------

def check_nccl_found(context, plain, recorded, infos):
    notes = instants_named(context, infos, "NCCL ")
    if not any("interposed: " in note and "libnccl" in note for note in notes):
        raise Failure(f"no note naming the NCCL that was found; notes: {notes}")
    if not any(metadata.get("nccl") is True for metadata in capture_metadata(infos)):
        raise Failure("the trace's capture metadata does not say NCCL was interposed")


def check_nccl_left_alone(context, plain, recorded, infos):
    if instants_named(context, infos, "NCCL "):
        raise Failure("--no-nccl: the trace has NCCL notes, so NCCL went through the shim")
    if any(metadata.get("nccl") is not False for metadata in capture_metadata(infos)):
        raise Failure("--no-nccl: the capture metadata does not say nccl=false")
    if "moescope:" in recorded.stderr:
        raise Failure(f"--no-nccl: the shim spoke: {recorded.stderr}")


def check_two_ranks(context, plain, recorded, infos):
    ranks = sorted(info["metadata"].get("rank", -1) for info in infos.values())
    if ranks != [0, 1]:
        raise Failure(f"expected traces of ranks 0 and 1, found ranks {ranks}")


def check_nvtx_steps(minimum):
    def check(context, plain, recorded, infos):
        names = []
        for trace in infos:
            names += [event.get("name", "") for event in chrome_events(context, trace)
                      if event.get("name", "").startswith("step ")]
        if len(names) < minimum:
            raise Failure(f"expected at least {minimum} NVTX step ranges, found {names}")
    return check


def check_one_warning(context, plain, recorded, infos):
    warnings = [line for line in recorded.stderr.splitlines() if line.startswith("moescope: ")]
    if len(warnings) != 1:
        raise Failure(f"expected exactly one warning from the shim, got {warnings}")


def fresh_folder(context, name):
    folder = os.path.join(context.work, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def check_no_worker_left(context, plain, recorded, infos):
    """Every worker of both runs (their pids in work/workers) is gone once the launcher ended."""
    def running(pid):  # a zombie waiting for its reaper has stopped
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    folder = os.path.join(context.work, "workers")
    left = []
    deadline = time.monotonic() + 10
    for name in os.listdir(folder):
        pid = int(name.split(".")[1])
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if running(pid):
            left.append(pid)
            os.kill(pid, signal.SIGKILL)
    if left:
        raise Failure(f"workers {left} outlived the launcher's SIGTERM\nrecorded stderr:\n"
                      f"{recorded.stderr[-2000:]}")


def check_jemalloc_kept(context, plain, recorded, infos):
    for run, label in ((plain, "plain"), (recorded, "recorded")):
        if "jemalloc mapped: yes" not in run.stdout:
            raise Failure(f"{label}: the program's own LD_PRELOAD (jemalloc) was lost")
    if "moescope mapped: yes" not in recorded.stdout:
        raise Failure("recorded: the shim is not in the process")


# ---- preparations ------------------------------------------------------------------------------

def prepare_c_project(context):
    target = os.path.join(context.work, "c_project")
    shutil.copytree(context.program("c_project"), target)


def prepare_setuid(context):
    if os.geteuid() != 0:
        raise Skip("needs root to make a setuid binary owned by another user")
    target = os.path.join(context.work, "preload_report_setuid")
    shutil.copy(context.preload_report, target)
    os.chown(target, 65534, 65534)  # nobody: running it as root changes the effective uid
    os.chmod(target, 0o4755)
    os.chmod(context.work, 0o755)


def mount_tmpfs(path, options):
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise Skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def prepare_full_disk(context):
    mount_tmpfs(os.path.join(context.trace_dir, "full"), "size=4m")


def prepare_read_only(context):
    mount_tmpfs(os.path.join(context.trace_dir, "read_only"), "ro,size=1m")


def with_jemalloc(context):
    for candidate in ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
                      "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2"):
        if os.path.exists(candidate):
            return {"LD_PRELOAD": candidate}
    raise Skip("libjemalloc.so.2 is missing (Debian package libjemalloc2; scripts/setup.sh)")


def torch_threads(context):
    return {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"}


CASES = [
    Case("torch_cpu_training",
         "PyTorch CPU training (autograd, AdamW, 30 steps): exit status, losses printed, trace",
         lambda c: [PYTHON, c.program("torch_cpu_training.py")],
         env=torch_threads, prepare=needs_module("torch"), pattern="training.moetrace"),
    Case("torchrun_gloo",
         "torchrun --nproc_per_node 2 with Gloo all_reduce/all_gather: exit status, each rank's "
         "results (order-free), one trace per rank",
         lambda c: [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    "2", c.program("torchrun_gloo.py")],
         stdout=rank_reports, env=torch_threads, prepare=needs_module("torch"),
         check=check_two_ranks, timeout=300),
    Case("torchrun_sigterm",
         "SIGTERM to torchrun while its 2 workers wait: the launcher's own handler stops the "
         "workers (exit status 1 both, no worker left); Python's subprocess resets handlers in a "
         "vfork child, which must not change the launcher's",
         lambda c: [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    "2", c.program("torchrun_waiting_worker.py"), fresh_folder(c, "workers")],
         stdout=None, env=torch_threads, prepare=needs_module("torch"),
         signal_when_ready=signal.SIGTERM, check=check_no_worker_left, traces="any",
         timeout=300),
    Case("torch_nccl",
         "NCCL through torch (torch.cuda.nccl.unique_id(), version(); the wheel's libnccl loaded "
         "in a local scope): same output, the trace names the NCCL found",
         lambda c: [PYTHON, c.program("torch_nccl_host_calls.py")],
         prepare=needs_module("torch"), check=check_nccl_found, pattern="nccl.moetrace"),
    Case("torch_nccl_off",
         "the same under --no-nccl: same output, no NCCL symbol of ours in the path",
         lambda c: [PYTHON, c.program("torch_nccl_host_calls.py")],
         record_args=["--no-nccl"], prepare=needs_module("torch"), check=check_nccl_left_alone,
         pattern="nccl.moetrace"),
    Case("numpy_threaded_blas",
         "numpy matmuls on 2 OpenBLAS threads: exit status, checksum",
         lambda c: [PYTHON, c.program("numpy_threaded_blas.py")],
         env=lambda c: {"OPENBLAS_NUM_THREADS": "2"}, prepare=needs_module("numpy"),
         pattern="numpy.moetrace"),
    Case("multiprocessing_fork",
         "multiprocessing Pool and Process with fork: exit status, results",
         lambda c: [PYTHON, c.program("multiprocessing_pool.py"), "fork"], traces="any"),
    Case("multiprocessing_spawn",
         "multiprocessing Pool and Process with spawn: exit status, results",
         lambda c: [PYTHON, c.program("multiprocessing_pool.py"), "spawn"], traces="any"),
    Case("shell_pipeline",
         "a bash pipeline of coreutils: exit status, output",
         lambda c: ["bash", "-c", "seq 1 5000 | sort -rn | head -3 | tr '\\n' ' '; exit 4"],
         traces="any"),
    Case("make_j2",
         "make -j2 of a small C project (fork/exec heavy), then the program: exit status, output",
         lambda c: ["bash", "-c", f"make -s -j2 -C {c.work}/c_project && "
                                  f"{c.work}/c_project/counter"],
         traces="any", prepare=prepare_c_project),
    Case("close_all_descriptors",
         "a program that closes every descriptor it did not open, then writes its own files: "
         "output, its file unchanged, the trace intact",
         lambda c: [PYTHON, c.program("close_all_descriptors.py"), f"{c.work}/own_file.txt"],
         pattern="closer.moetrace"),
    Case("static_binary",
         "a statically linked binary (LD_PRELOAD cannot apply): exit status, output, no trace",
         lambda c: [c.static_hello, "argument"], traces="none", pattern="static.moetrace"),
    Case("setuid_binary",
         "a setuid binary (the loader ignores LD_PRELOAD): the shim stays out, same output",
         lambda c: [f"{c.work}/preload_report_setuid"], traces="none",
         pattern="setuid.moetrace", prepare=prepare_setuid),
    Case("existing_preload",
         "a program already run with LD_PRELOAD=jemalloc: jemalloc stays, the shim joins",
         lambda c: [c.preload_report], stdout=None, env=with_jemalloc,
         pattern="preload.moetrace", check=check_jemalloc_kept),
    Case("killed_by_sigterm",
         "SIGTERM sent to the top process while the program works: exit status 143, trace "
         "readable with its NVTX ranges",
         lambda c: [PYTHON, c.program("kill_self.py"), "wait"],
         signal_when_ready=signal.SIGTERM, prepare=needs_module("nvtx"),
         check=check_nvtx_steps(3), pattern="sigterm.moetrace"),
    Case("killed_by_sigkill",
         "the program killed by SIGKILL (no handler runs): exit status 137, trace readable up to "
         "the last flush",
         lambda c: [PYTHON, c.program("kill_self.py"), "SIGKILL"],
         prepare=needs_module("nvtx"), check=check_nvtx_steps(3), pattern="sigkill.moetrace"),
    Case("full_disk",
         "the trace's disk is full (4 MB tmpfs the program fills): same output, one warning",
         lambda c: [PYTHON, c.program("fill_disk.py"), f"{c.trace_dir}/full"],
         pattern="full/run.moetrace", prepare=lambda c: (needs_module("nvtx")(c),
                                                          prepare_full_disk(c)),
         check=check_one_warning,
         private_mounts=True, traces="any"),
    Case("unwritable_output",
         "the trace's folder is read-only: same output, one warning, no trace",
         lambda c: [PYTHON, c.program("numpy_threaded_blas.py")],
         pattern="read_only/run.moetrace", prepare=prepare_read_only, check=check_one_warning,
         private_mounts=True, traces="none"),
]
