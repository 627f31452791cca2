#!/usr/bin/env bash
# Does rebalancing pay, and does the plan say so beforehand? (docs/performance.md, "Step time
# prediction of a placement: every cost"; issue 32.) For each seed: moe_train on 2 CPU ranks
# (Gloo) under `moescope record` with the demo's model and layer 1's router skewed, once without
# balancing and once with 2 redundant experts rebalanced every WINDOW steps; then `moescope plan
# --advise` on the skewed run alone (every cost fitted from it) and `moescope diff --predicted`
# against the rebalanced run: the plan replays the runtime rebalancer's decisions (every WINDOW
# steps, threshold 1.05) on the skewed run's recorded loads. One table row per pair: predicted net change with its interval,
# the advice, the measured change with its interval, and whether the prediction lies inside.
#   bench/rebalance_pairs_bench.sh [BUILD_DIR] [PAIRS] [STEPS]      (default: build 10 200)
# Environment: MOESCOPE_BENCH_DIR (work folder, default a new temporary one), WINDOW (10),
# FIRST_SEED (1: the seeds are FIRST_SEED .. FIRST_SEED + PAIRS - 1), PLAN_ARGS (the plan's
# rebalancer options, default "--rebalance-every WINDOW --rebalance-threshold 1.05"; " " (a
# blank) predicts the one placement planned from the whole run, applied once; add
# "--rebalance-rule imbalance" with REBALANCED_ARGS="--rebalance-rule imbalance"),
# PYTHON (python3 with torch), REBALANCED_ARGS (more moe_train options for the rebalanced run,
# e.g. "--rebalance-plan forecast"), REPLAN_ONLY=1 (no training: plan and diff again the runs
# already in MOESCOPE_BENCH_DIR, e.g. with another build's prediction), REPEAT_SKEWED=1 (train
# the skewed run a second time, identically, and print the two runs' step time difference: the
# run-to-run variation that each pair's interval, from the steps inside each run, leaves out;
# the summary then gives its standard deviation sigma_run by `moescope noise` over the pairs),
# RUN_TO_RUN (ms: `diff --run-to-run`, the check's interval includes that run-to-run SD). 20 training runs of 200 steps: about 30 minutes on 2 idle cores.
set -uo pipefail
build=$(cd "${1:-build}" && pwd)
pairs=${2:-10}
steps=${3:-200}
window=${WINDOW:-10}
python=${PYTHON:-python3}
work="${MOESCOPE_BENCH_DIR:-$(mktemp -d)}"
moescope=$build/bin/moescope
hidden=64 ffn=128 experts=8
model=(--layers 2 --experts $experts --top-k 2 --hidden $hidden --heads 4 --ffn-hidden $ffn
       --batch 16 --seq-len 64 --lr 3e-3)
train() {  # train OUT SEED ARGS...
  local out=$1 seed=$2
  shift 2
  local port=$((20000 + RANDOM % 20000))
  mkdir -p "$out"
  OMP_NUM_THREADS=1 "$moescope" record -o "$out/run.%r.moetrace" -- "$python" -m torch.distributed.run \
    --no-python --nproc_per_node 2 --master_addr 127.0.0.1 --master_port "$port" "$build/bin/moe_train" \
    "${model[@]}" --steps "$steps" --threads 1 --gate-skew 3 --skew-layer 1 --log-every 50 \
    --seed "$seed" --balance none "$@" > "$out/train.log" 2>&1
}
echo "work folder: $work"
: > "$work/pairs.jsonl"  # this run's rows only
echo "| seed | predicted (ms/step) | advice | measured (ms/step) | inside | replica sync predicted / measured all-reduce change | skewed again - skewed (ms/step) |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
first_seed=${FIRST_SEED:-1}
for ((seed = first_seed; seed < first_seed + pairs; seed++)); do
  dir="$work/pair$seed"
  if [ -z "${REPLAN_ONLY:-}" ]; then
    train "$dir/skewed" "$seed" || { echo "| $seed | training failed ($dir/skewed/train.log) |"; continue; }
    train "$dir/rebalanced" "$seed" --redundant-experts 2 --rebalance-every "$window" \
      --rebalance-threshold 1.05 --dispatch-pool ${REBALANCED_ARGS:-} || { echo "| $seed | training failed ($dir/rebalanced/train.log) |"; continue; }
    if [ -n "${REPEAT_SKEWED:-}" ]; then
      train "$dir/skewed_again" "$seed" || { echo "| $seed | training failed ($dir/skewed_again/train.log) |"; continue; }
    fi
  fi
  rm -f "$dir/again.json"
  if [ -d "$dir/skewed_again" ]; then
    "$moescope" diff "$dir"/skewed/run.[0-9]*.moetrace --against "$dir"/skewed_again/run.[0-9]*.moetrace \
      --skip-steps "$window" --format json -o "$dir/again.json" > /dev/null 2>&1
  fi
  "$moescope" plan --gpus 2 --slots $((experts + 2)) --skip-steps "$window" --window "$window" \
    --expert-bytes $((3 * hidden * ffn * 4)) --tensors-per-expert 2 ${PLAN_ARGS:---rebalance-every $window --rebalance-threshold 1.05} \
    --advise --json "$dir/plan.json" \
    "$dir"/skewed/run.[0-9]*.moetrace > "$dir/plan.txt" 2>&1
  "$moescope" diff "$dir"/skewed/run.[0-9]*.moetrace --against "$dir"/rebalanced/run.[0-9]*.moetrace \
    --skip-steps "$window" --predicted "$dir/plan.json" ${RUN_TO_RUN:+--run-to-run "$RUN_TO_RUN"} \
    --format json -o "$dir/diff.json" > /dev/null 2>&1
  "$python" - "$dir/plan.json" "$dir/diff.json" "$seed" "$work/pairs.jsonl" "$dir/again.json" <<'PY'
import json, os, sys
plan, diff, seed = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
again = "-"
if os.path.exists(sys.argv[5]):  # the same skewed run again: its step time - the first's
    step = next((r for r in json.load(open(sys.argv[5]))["rows"] if r["name"] == "step time"), None)
    if step:
        again = "%+.2f [%+.2f, %+.2f]" % (step["difference"], step["low"], step["high"])
p, check = plan["prediction"], diff["prediction"]
sync = next((t["ms"] for t in p["terms"] if t["name"] == "replica grad sync"), 0.0)
allreduce = next((r for r in diff["rows"] if r["name"] == "all_reduce time"), None)
measured_ar = "%+.2f" % allreduce["difference"] if allreduce else "-"
print("| %s | %+.2f [%+.2f, %+.2f] | %s | %+.2f [%+.2f, %+.2f] | %s | %+.2f / %s | %s |" % (
    seed, p["step_ms_change"], p["step_ms_change_low"], p["step_ms_change_high"],
    "rebalance" if plan["advice"]["rebalance"] else "keep", check["measured_step_ms_change"],
    check["measured_low"], check["measured_high"],
    "yes" if check["inside_interval"] else "no", sync, measured_ar, again))
with open(sys.argv[4], "a") as rows:
    rows.write(json.dumps({"inside": bool(check["inside_interval"]),
                           "faster": check["measured_high"] < 0,
                           "slower": check["measured_low"] > 0}) + "\n")
PY
done
"$python" - "$work/pairs.jsonl" <<'PY'
import json, sys
try:
    rows = [json.loads(line) for line in open(sys.argv[1])]
except FileNotFoundError:
    rows = []
count = lambda key: sum(row[key] for row in rows)
print("\n%d pairs: prediction inside the measured interval in %d; rebalanced faster beyond the "
      "noise in %d, slower beyond it in %d" % (len(rows), count("inside"), count("faster"),
                                                 count("slower")))
PY
# The run-to-run SD from the identical pairs, pooled over the seeds (one program each).
repeats=()
for ((seed = first_seed; seed < first_seed + pairs; seed++)); do
  [ -d "$work/pair$seed/skewed_again" ] && repeats+=(--runs "$work/pair$seed/skewed" "$work/pair$seed/skewed_again")
done
if [ ${#repeats[@]} -gt 0 ]; then
  echo
  "$moescope" noise --skip-steps "$window" "${repeats[@]}" 2>&1 | tail -3
fi
