"""MoE health scalars where users look (docs/metrics.md), end to end on a real Hugging Face MoE
training loop (tiny Mixtral on CPU, layer 1's router biased toward one expert) that logs its own
loss to a dashboard and knows nothing of moescope:

- tensorboard: recorded with `moescope record --metrics jsonl:FILE`, a real TensorBoard
  EventAccumulator reads the program's log directory back: its loss and our
  moescope/layer1/max_over_mean at the same global steps; then `moescope metrics --tensorboard`
  on the trace gives the same values post hoc;
- wandb: the same with an offline wandb run, read back from the run's .wandb file;
- top_once_torchrun: `moescope top --once` on a live 2-rank torchrun Gloo job shows both ranks
  progressing and layer 1 skewed toward the biased expert, while the traces are still written;
- top_interactive_pty: the interactive `moescope top` driven through a pseudo-terminal;
- top_names_a_hang: a 2-rank torchrun Gloo loop whose rank 1 sleeps before a collective (the
  flight recorder's test program): while it hangs, `moescope top --once` calls the job stalled;
- top_names_killed_ranks: the same loop with every process SIGKILLed: top calls its ranks gone.

usage: dashboards_test.py --case NAME --moescope BIN --programs DIR --work DIR
Exit 0 pass, 1 fail, 77 skipped (a Python package is missing), with the reason on stdout.
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autocapture_test import Context, expect, need  # noqa: E402
from autocapture_test import main as run_case  # noqa: E402

STEPS = 6
PROGRAM = "hf_moe_dashboard_train.py"


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def live_lines(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def scalars_of(directory):
    """tag -> [(step, value)] as TensorBoard's EventAccumulator reads the directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    accumulator = EventAccumulator(directory, size_guidance={"scalars": 0})
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def check_hot_layer(series, where):
    hot = [value for _, value in series["moescope/layer1/max_over_mean"]]
    cold = [value for _, value in series["moescope/layer0/max_over_mean"]]
    expect(min(hot) >= 3.0, f"{where}: layer 1 max/mean {hot}, its router is biased")
    expect(max(cold) < min(hot), f"{where}: layer 0 max/mean {cold} vs layer 1 {hot}")


def posthoc_matches_live(context, live):
    """`moescope metrics` on the trace: EventAccumulator reads the same layer values per step."""
    posthoc = fresh(os.path.join(context.work, "posthoc"))
    done = subprocess.run([context.moescope, "metrics", *context.traces(), "--tensorboard",
                           posthoc, "--quiet"], capture_output=True, text=True, timeout=120)
    expect(done.returncode == 0, f"moescope metrics failed: {done.stderr}")
    series = scalars_of(posthoc)
    check_hot_layer(series, "moescope metrics --tensorboard")
    steps = [step for step, _ in series["moescope/layer1/max_over_mean"]]
    expect(steps == list(range(STEPS)), f"post hoc steps {steps}")
    for line in live:
        for name in ("moescope/layer0/max_over_mean", "moescope/layer1/cv",
                     "moescope/max_over_mean/p90", "moescope/layer1/dead_experts"):
            posthoc_value = dict(series[name])[line["step"]]
            expect(abs(posthoc_value - line["scalars"][name]) <= 1e-5 * max(1.0, posthoc_value),
                   f"{name} at step {line['step']}: live {line['scalars'][name]}, post hoc "
                   f"{posthoc_value}")


def dashboards_tensorboard(context):
    """The program's SummaryWriter run holds its loss and moescope/layer1/max_over_mean at the
    same global steps (EventAccumulator), and moescope metrics gives the same values post hoc."""
    need("torch", "transformers", "tensorboard")
    base = fresh(os.path.join(context.work, "tb"))
    live_file = os.path.join(context.work, "live.jsonl")
    if os.path.exists(live_file):
        os.remove(live_file)
    context.record([sys.executable, context.program(PROGRAM), "tensorboard", base, str(STEPS)],
                   pattern="tb.moetrace", options=["--metrics", f"jsonl:{live_file}"])
    runs = {run: glob.glob(os.path.join(base, run, "*.moescope")) for run in os.listdir(base)}
    ours = [run for run, files in runs.items() if files]
    expect(len(runs) == 2 and len(ours) == 1,
           f"expected the plain and the recorded run, ours only in the recorded one: {runs}")
    series = scalars_of(os.path.join(base, ours[0]))
    global_steps = [10 * step for step in range(STEPS)]
    expect([step for step, _ in series.get("loss", [])] == global_steps,
           f"the program's loss: {series.get('loss')}")
    expect([step for step, _ in series.get("moescope/layer1/max_over_mean", [])] == global_steps,
           f"moescope/layer1/max_over_mean at {series.get('moescope/layer1/max_over_mean')}, "
           f"the program logged at {global_steps}")
    check_hot_layer(series, "live")
    expect(len(series) <= 1 + 10 * 2 + 20, f"{len(series)} series: {sorted(series)}")
    live = live_lines(live_file)
    expect([line["step"] for line in live] == list(range(STEPS))
           and [line["global_step"] for line in live] == global_steps,
           f"record --metrics jsonl: steps {[(l['step'], l['global_step']) for l in live]}")
    posthoc_matches_live(context, live)


def wandb_records(run_file):
    """The serialized records of a .wandb file: LevelDB's log format (32 KiB blocks; each
    fragment has a 7-byte header: CRC, length, type FULL 1 / FIRST 2 / MIDDLE 3 / LAST 4) after
    W&B's 7-byte file header (":W&B", magic, version)."""
    import struct
    with open(run_file, "rb") as handle:
        data = handle.read()
    expect(data[:4] == b":W&B", f"{run_file} is not a wandb run file")
    block, offset, pending = 32768, 7, b""
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header is padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack_from("<IHB", data, offset)
        chunk = data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 2):
            pending = chunk
        elif kind in (3, 4):
            pending += chunk
        if kind in (1, 4):
            yield pending


def wandb_history(run_file):
    """[{key: value}] of the history rows of an offline run's .wandb file."""
    from wandb.proto import wandb_internal_pb2
    rows = []
    for data in wandb_records(run_file):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def dashboards_wandb(context):
    """An offline wandb run holds the program's loss at steps 0, 10, ... and moescope/* with
    moescope/step equal to those steps (read back from the run's .wandb file)."""
    need("torch", "transformers", "wandb")
    base = fresh(os.path.join(context.work, "wandb"))
    context.env.update(WANDB_SILENT="true", WANDB_MODE="offline")
    context.record([sys.executable, context.program(PROGRAM), "wandb", base, str(STEPS)],
                   pattern="wandb.moetrace")
    run_files = sorted(glob.glob(os.path.join(base, "wandb", "offline-run-*", "*.wandb")),
                       key=os.path.getmtime)
    expect(len(run_files) == 2, f"expected the plain and the recorded run: {run_files}")
    rows = wandb_history(run_files[-1])
    losses = [row["_step"] for row in rows if "loss" in row]
    global_steps = [10 * step for step in range(STEPS)]
    expect(losses == global_steps, f"the program's loss at steps {losses}")
    ours = {row["moescope/step"]: row for row in rows if "moescope/step" in row}
    expect(sorted(ours) == global_steps, f"moescope/step values {sorted(ours)}")
    hot = [ours[step]["moescope/layer1/max_over_mean"] for step in global_steps]
    cold = [ours[step]["moescope/layer0/max_over_mean"] for step in global_steps]
    expect(min(hot) >= 3.0 and max(cold) < min(hot), f"layer 1 {hot}, layer 0 {cold}")
    plain = [row for row in wandb_history(run_files[0]) if "moescope/step" in row]
    expect(not plain, "the plain run has moescope scalars")


def top_frame(context, folder):
    done = subprocess.run([context.moescope, "top", "--once", folder], capture_output=True,
                          text=True, timeout=120)
    expect(done.returncode == 0, f"moescope top --once failed: {done.stderr}")
    ranks = {int(m.group(1)): int(m.group(2))
             for m in re.finditer(r"^(\d+)\s+(\d+)\s+\d+\s+[\d.]+", done.stdout, re.M)}
    layers = {int(m.group(1)): (float(m.group(2)), m.group(3))
              for m in re.finditer(r"^(\d+)\s+([\d.]+)\s+[\d.]+\s+\d+\s+(.*)$", done.stdout,
                                   re.M)}
    return done.stdout, ranks, layers


def descendants(pid):
    """Every process below `pid`, as psutil processes (empty without psutil or once gone)."""
    try:
        import psutil
        return psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - no psutil, or the job already ended
        return []


def kill_all(processes):
    for process in processes:
        try:
            process.kill()
        except Exception:  # noqa: BLE001 - already gone
            pass


def stop_job(job, log):
    """Stops a recorded torchrun job started in a session of its own, and closes its log.
    torchrun's workers may live in sessions of their own: every process of the job is listed
    before the launcher is stopped, and whatever is left of it is killed after."""
    job_processes = descendants(job.pid)
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGTERM)
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    kill_all(job_processes)
    log.close()


def top_once_torchrun(context):
    """`moescope top --once` on a live 2-rank torchrun Gloo job: both ranks with finished
    steps, still being written, and layer 1 skewed toward its biased expert (e3)."""
    need("torch", "transformers")
    folder = fresh(os.path.join(context.work, "top"))
    log = open(os.path.join(context.work, "top_job.log"), "w")
    job = subprocess.Popen(
        [context.moescope, "record", "-o", os.path.join(folder, "run.%r.moetrace"), "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         context.program("hf_moe_train.py"), "mixtral", "100000"],
        env=context.env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    frame, seen = "", False
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and job.poll() is None:
            time.sleep(1.0)
            frame, ranks, layers = top_frame(context, folder)
            if (sorted(ranks) == [0, 1] and min(ranks.values()) >= 3 and 1 in layers
                    and "still writing" in frame):
                seen = job.poll() is None
                break
    finally:
        stop_job(job, log)
    expect(seen, f"no frame with both ranks at >= 3 steps while the job ran:\n{frame}\n"
                 f"job exit {job.returncode}: {open(log.name).read()[-2000:]}")
    expect("(2 still writing)" in frame, f"the traces were not read while written:\n{frame}")
    expect("stalled:" not in frame and "behind:" not in frame,
           f"a job in step, going on, read as behind or stalled:\n{frame}")
    hot, experts = layers[1]
    # Top-2: expert 3 takes every token once; its partner varies (a tie is listed by index).
    share = re.search(r"\be3 (\d+)%", experts)
    expect(hot >= 3.0 and share is not None and int(share.group(1)) >= 40,
           f"layer 1 should be skewed toward expert 3:\n{frame}")
    # Layer 0 is not biased, but this tiny random model drifts skewed too (seen up to 3.5):
    # nothing is asserted about it.


def top_interactive_pty(context):
    """`moescope top` in a pseudo-terminal: it redraws the frame every interval, quits on `q`
    with status 0, and leaves the terminal in the mode it found."""
    import pty
    import termios
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                        "moe_train_2ranks")
    controller, terminal = pty.openpty()
    before = termios.tcgetattr(terminal)
    top = subprocess.Popen([context.moescope, "top", "--interval", "0.2", data], stdin=terminal,
                           stdout=terminal, stderr=terminal, close_fds=True)
    output, deadline = b"", time.monotonic() + 60
    try:
        while output.count(b"\x1b[2J") < 3 and time.monotonic() < deadline:
            output += os.read(controller, 65536)
        os.write(controller, b"q")
        rc = top.wait(timeout=30)
        after = termios.tcgetattr(terminal)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
        os.close(controller)
        os.close(terminal)
    text = output.decode(errors="replace")
    expect(text.count("\x1b[2J") >= 3, f"fewer than 3 frames in 60 s:\n{text[-3000:]}")
    expect(rc == 0, f"moescope top exited with {rc} after q")
    frame = text.split("\x1b[2J")[-2]  # complete: another began after it
    expect("moescope top: 2 ranks (0 still writing)" in frame and "(q quits)" in frame, frame)
    # --skew-layer 1 with top-2 of 4 experts: two experts take every token, two are dead.
    expect(re.search(r"^1\s+2\.00\s+[\d.]+\s+2\s", frame, re.M) is not None,
           f"layer 1 (--skew-layer 1) is not shown saturated with 2 dead experts:\n{frame}")
    expect(after[3] == before[3], "the terminal's local modes were not restored")


def start_gloo_steps(context, name, *arguments):
    """The flight recorder's 2-rank Gloo loop (tests/flight/programs/gloo_steps.py) under
    `moescope record` into a fresh folder `name`, in a session of its own: (folder, job, log)."""
    folder = fresh(os.path.join(context.work, name))
    log = open(os.path.join(context.work, name + "_job.log"), "w")
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "flight",
                           "programs", "gloo_steps.py")
    job = subprocess.Popen(
        [context.moescope, "record", "-o", os.path.join(folder, "run.%r.moetrace"), "--",
         sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         program, *arguments],
        env=context.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return folder, job, log


def top_names_a_hang(context):
    """Rank 1 of a 2-rank Gloo loop sleeps 120 s before its 5th all_reduce, so rank 0 waits in
    it: before the sleep ends, `moescope top --once` says no rank has finished a step for at
    least 30 s, with both ranks still writing and neither behind (lockstep), and names the
    all_reduce rank 0 waits in and rank 1 as the rank that never entered it. Once the job is
    stopped, `moescope report` on its traces says the same under "What happened", with how long
    rank 0 had waited when the recording stopped."""
    need("torch")
    folder, job, log = start_gloo_steps(context, "top_hang", "--steps", "10", "--stall-rank",
                                        "1", "--stall-at", "5", "--stall-seconds", "120")
    frame, stalled = "", None
    try:
        deadline = time.monotonic() + 110  # the sleep ends at about 10 s + 120 s
        while time.monotonic() < deadline and job.poll() is None:
            time.sleep(2.0)
            frame, ranks, _ = top_frame(context, folder)
            stalled = re.search(r"^stalled: no rank still writing has finished a step for "
                                r"(\d+) s", frame, re.M)
            if stalled:
                break
    finally:
        stop_job(job, log)
    expect(stalled is not None, f"no stalled line while rank 1 slept:\n{frame}\n"
                                f"job: {open(log.name).read()[-2000:]}")
    expect(30 <= int(stalled.group(1)) <= 110, f"stalled for an unlikely time:\n{frame}")
    expect("(2 still writing)" in frame and sorted(ranks) == [0, 1] and
           min(ranks.values()) == 5, f"both ranks should have finished 5 steps:\n{frame}")
    expect("behind:" not in frame, f"lockstep ranks read as behind:\n{frame}")
    stuck = re.search(r"^  in all_reduce #(\d+) of comm [0-9a-f]{16}: rank 0 waiting \(up to "
                      r"(\d+) s\); never entered it: rank 1 \(last completed all_reduce "
                      r"#(\d+)\)$", frame, re.M)
    expect(stuck is not None, f"the collective rank 0 waits in is not named:\n{frame}")
    expect(int(stuck.group(1)) == int(stuck.group(3)) + 1 and
           25 <= int(stuck.group(2)) <= 110, f"unlikely collective or wait:\n{frame}")
    report = subprocess.run([context.moescope, "report", folder], capture_output=True,
                            text=True, timeout=300)
    expect(report.returncode == 0, f"moescope report failed: {report.stderr}")
    expect(report.stdout.startswith("What happened") and
           f"Collective all_reduce #{stuck.group(1)} of comm " in report.stdout and
           ": rank 1 never entered it; rank 0 waits in it" in report.stdout,
           f"the report of the stopped job does not name the hang:\n{report.stdout[:3000]}")
    # How long rank 0 had waited when the recording stopped (its closing statistics record):
    # at least what top saw, less than the sleep.
    waited = re.search(rf"open: all_reduce #{stuck.group(1)} \([^)]*\), for ([\d.]+) s",
                       report.stdout)
    expect(waited is not None and int(stuck.group(2)) - 1 <= float(waited.group(1)) <= 125,
           f"the report does not say how long rank 0 waited (top saw {stuck.group(2)} s):\n"
           f"{report.stdout[:3000]}")


def top_names_killed_ranks(context):
    """A 2-rank torchrun Gloo loop recorded, then every process of the job SIGKILLed (no trace
    is closed): `moescope top --once` says both ranks are gone without closing their traces
    (their processes no longer exist on this host), counts none as still writing, and does not
    call the job stalled; `moescope report` on the folder has the 2 ranks, the launcher's trace
    (left behind: nothing could remove it) left out with a note."""
    need("torch", "psutil")
    folder, job, log = start_gloo_steps(context, "top_killed", "--steps", "100000",
                                        "--step-sleep", "0.05")
    frame, ranks = "", {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and job.poll() is None:
            time.sleep(1.0)
            frame, ranks, _ = top_frame(context, folder)
            if sorted(ranks) == [0, 1] and min(ranks.values()) >= 3:
                break
        job_processes = descendants(job.pid)
        os.killpg(job.pid, signal.SIGKILL)
        kill_all(job_processes)
        job.wait()
        import psutil
        psutil.wait_procs(job_processes, timeout=30)
    finally:
        log.close()
    expect(sorted(ranks) == [0, 1] and min(ranks.values()) >= 3,
           f"the job did not reach 3 steps on both ranks:\n{frame}")
    frame, ranks, _ = top_frame(context, folder)
    expect("(0 still writing)" in frame and sorted(ranks) == [0, 1],
           f"killed ranks read as still writing:\n{frame}")
    expect("gone: ranks 0-1 ended without closing their traces (no such process on this host"
           in frame, f"the killed ranks are not named gone:\n{frame}")
    expect("stalled:" not in frame, f"a killed job read as stalled:\n{frame}")
    # The launcher's trace stays behind (nothing removed it): the report leaves it out instead
    # of calling it a third rank.
    launchers = [name for name in os.listdir(folder) if ".norank." in name]
    report = subprocess.run([context.moescope, "report", folder], capture_output=True,
                            text=True, timeout=300)
    expect(report.returncode == 0, f"moescope report failed: {report.stderr}")
    expect(re.search(r"^2 rank\(s\), ", report.stdout, re.M) is not None,
           f"the killed job's report does not have 2 ranks:\n{report.stdout[:2000]}")
    expect(not launchers or "holds nothing of its program" in report.stderr,
           f"the launcher's trace {launchers} is not said to be left out:\n{report.stderr}")


CASES = {
    "dashboards_tensorboard": dashboards_tensorboard,
    "dashboards_wandb": dashboards_wandb,
    "top_once_torchrun": top_once_torchrun,
    "top_interactive_pty": top_interactive_pty,
    "top_names_a_hang": top_names_a_hang,
    "top_names_killed_ranks": top_names_killed_ranks,
}


if __name__ == "__main__":
    sys.exit(run_case(CASES, __doc__))
