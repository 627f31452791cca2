#!/usr/bin/env bash
# Profiler overhead on a real training step: moe_train step time with vs without
# `moescope record`, runs interleaved (plain, recorded, recorded, plain, ...) so drifting machine
# load hits both alike. Each run trains STEPS steps; the first WARMUP are dropped, the median of
# the rest (50 by default) is that run's step time. Prints the ratio of the medians over all
# runs (target: <= 1.03) and the per-pair ratios.
#
#   bench/moe_train_overhead.sh [BUILD_DIR] [PAIRS]
# Environment: STEPS (60), WARMUP (10), RANKS (1; 2 = torchrun on 2 CPU ranks), MOE_TRAIN_ARGS
# (model settings, default: the demo's model with the skewed router), AA (1 = an A/A control:
# the "recorded" runs are plain too, so the printed ratio is the machine's noise floor).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
pairs=${2:-3}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
ranks=${RANKS:-1}
control=${AA:-0}
args=${MOE_TRAIN_ARGS:---layers 2 --experts 8 --top-k 2 --hidden 64 --heads 4 --ffn-hidden 128 --batch 16 --seq-len 64 --gate-skew 3 --skew-layer 1}
moe_train=$build/bin/moe_train
moescope=$build/bin/moescope
for binary in "$moe_train" "$moescope"; do
  [ -x "$binary" ] || { echo "moe_train_overhead: $binary is not built" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/moe_train_overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT

# launch MODE LOG: one training run, plain or under moescope record.
launch() {
  local mode=$1 log=$2 launcher=()
  if [ "$ranks" -gt 1 ]; then
    local port=$((20000 + RANDOM % 20000))
    launcher=(python3 -m torch.distributed.run --no-python --nproc_per_node "$ranks"
              --master_addr 127.0.0.1 --master_port "$port")
  fi
  local run=("${launcher[@]}" "$moe_train" $args --steps "$steps" --threads 1 --log-every 1)
  if [ "$mode" = recorded ] && [ "$control" != 1 ]; then
    rm -f "$work"/run.*.moetrace
    OMP_NUM_THREADS=1 "$moescope" record -o "$work/run.%r.moetrace" -- "${run[@]}" > "$log" 2>&1
  else
    OMP_NUM_THREADS=1 "${run[@]}" > "$log" 2>&1
  fi
}

echo "moe_train_overhead: $pairs pairs x $steps steps (median of steps >= $warmup), $ranks rank(s)"
echo "  moe_train $args"
[ "$control" = 1 ] && echo "  AA=1: both sides run plain (noise floor of the ratio)"
for ((pair = 0; pair < pairs; ++pair)); do
  if ((pair % 2 == 0)); then order=(plain recorded); else order=(recorded plain); fi
  for mode in "${order[@]}"; do
    launch "$mode" "$work/$mode.$pair.log" || { echo "run failed:"; tail -20 "$work/$mode.$pair.log"; exit 1; }
  done
  trace_bytes=$( (cat "$work"/run.*.moetrace 2>/dev/null || true) | wc -c)
  echo "  pair $pair done (last trace: $trace_bytes bytes)"
done

python3 - "$work" "$pairs" "$warmup" "$control" <<'EOF'
import re, statistics, sys
work, pairs, warmup, control = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
def step_ms(path):
    values = []
    for line in open(path):
        m = re.match(r"step (\d+) .* step_ms ([0-9.]+)", line)
        if m and int(m.group(1)) >= warmup:
            values.append(float(m.group(2)))
    return values
all_plain, all_recorded = [], []
print("pair  plain median ms  recorded median ms  ratio  (steps per run)")
for pair in range(pairs):
    plain, recorded = step_ms(f"{work}/plain.{pair}.log"), step_ms(f"{work}/recorded.{pair}.log")
    all_plain += plain; all_recorded += recorded
    p, r = statistics.median(plain), statistics.median(recorded)
    print(f"{pair:4d}  {p:15.3f}  {r:18.3f}  {r / p:5.3f}  ({len(plain)}, {len(recorded)})")
p, r = statistics.median(all_plain), statistics.median(all_recorded)
print(f"all   {p:15.3f}  {r:18.3f}  {r / p:5.3f}")
if control:
    print(f"A/A control, plain / plain (median): {r / p:.3f} (the noise floor of the ratio)")
else:
    print(f"moe_train step time under moescope record / plain (median): {r / p:.3f} "
          f"(target <= 1.030: {'met' if r / p <= 1.03 else 'NOT met'})")
EOF
