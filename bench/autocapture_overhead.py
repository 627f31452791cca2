"""What the zero-code capture costs a PyTorch training step: the tiny Mixtral of
tests/autocapture (transformers, CPU) trained by a plain loop, plain vs under `moescope record`
(default capture: steps, phases, module spans, expert load; optionally --torch-ops), runs
interleaved (plain, recorded, recorded, plain, ...) so drifting machine load hits both alike.
Each run trains --steps steps and reports the median step time of those after --warmup, by the
wall clock and by the process's CPU time (all its threads, the recorder's included; less
disturbed by other work on a shared machine); the printed ratios are the median of the recorded
runs over the median of the plain ones. --aa makes
both sides plain: the ratio the machine's noise alone gives. --baseline-args records the
baseline side too, with those options (e.g. the live metrics against a recording without them:
--baseline-args="--metrics off" --record-args="--metrics jsonl:/tmp/m.jsonl").

    python3 bench/autocapture_overhead.py --moescope build/bin/moescope [--pairs 6]
        [--steps 40] [--warmup 5] [--record-args=--torch-ops] [--baseline-args=...] [--aa]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "..", "tests", "autocapture", "programs")

TIMED_LOOP = r"""
import sys, time, json
sys.path.insert(0, sys.argv[1])
import torch, transformers, hf_moe_train
torch.manual_seed(0); torch.set_num_threads(1)
steps, family = int(sys.argv[2]), sys.argv[3]
model = transformers.AutoModelForCausalLM.from_config(hf_moe_train.tiny_config(family))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 128, (4, 32))
times, cpu_times = [], []
for step in range(steps):
    begin, cpu_begin = time.perf_counter(), time.process_time()
    loss = model(input_ids=tokens, labels=tokens).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - begin)
    cpu_times.append(time.process_time() - cpu_begin)
print(json.dumps([times, cpu_times]))
"""


def run(args, recorded, work):
    command = [sys.executable, "-c", TIMED_LOOP, PROGRAMS, str(args.steps), args.family]
    if not args.aa and (recorded or args.baseline_args):
        options = args.record_args if recorded else args.baseline_args
        command = [args.moescope, "record", "-o", os.path.join(work, "run.moetrace"),
                   *options.split(), "--", *command]
    env = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error")
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    times, cpu_times = json.loads(done.stdout.strip().splitlines()[-1])
    return statistics.median(times[args.warmup:]), statistics.median(cpu_times[args.warmup:])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--family", default="mixtral")
    parser.add_argument("--record-args", default="")
    parser.add_argument("--baseline-args", default="",
                        help="record the baseline side too, with these options")
    parser.add_argument("--aa", action="store_true")
    args = parser.parse_args()
    plain, recorded = [], []
    with tempfile.TemporaryDirectory() as work:
        for pair in range(args.pairs):
            for is_recorded in ((False, True) if pair % 2 == 0 else (True, False)):
                (recorded if is_recorded else plain).append(run(args, is_recorded, work))
    baseline = f"recorded {args.baseline_args}" if args.baseline_args else "plain"
    label = "A/A (plain/plain)" if args.aa else \
        f"recorded{' ' + args.record_args if args.record_args else ''}/{baseline}"
    print(f"autocapture_overhead {args.family}: {args.pairs} pairs x {args.steps} steps")
    for index, clock in ((0, "wall"), (1, "process CPU")):
        plain_median = statistics.median(run[index] for run in plain)
        recorded_median = statistics.median(run[index] for run in recorded)
        print(f"  {clock}: median step {baseline} {plain_median * 1e3:.2f} ms, "
              f"{'second plain' if args.aa else 'recorded'} {recorded_median * 1e3:.2f} ms; "
              f"{label} = {recorded_median / plain_median:.3f}; per pair: "
              + " ".join(f"{r[index] / p[index]:.3f}" for p, r in zip(plain, recorded)))

if __name__ == "__main__":
    main()
