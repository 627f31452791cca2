#!/usr/bin/env bash
# Part "samples" of tests/device/run.sh (one H200): moe_train in bf16 on one GPU under
# `moescope record`, then tokens/s, `moescope report` and the expert load of the skewed layer.
# Usage: tests/device/samples_run.sh BUNDLE WORK_DIR
#   BUNDLE: what tests/device/prepare.sh built (bin/moe_train, bin/moescope, lib/ shims)
# Exit status: 0 passed, 77 no CUDA device, else a failure (training failed, the trace lacks
# steps or expert load, the report failed).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bundle=${1:?usage: samples_run.sh BUNDLE WORK_DIR}
work=${2:?work folder}
for needed in "$bundle/bin/moe_train" "$bundle/bin/moescope" "$bundle/lib/libmoescope_inject.so"; do
  [ -e "$needed" ] || { echo "samples_run.sh: $needed is missing (run tests/device/prepare.sh)"; exit 3; }
done
mkdir -p "$work"
rm -f "$work"/run.*.moetrace

args=(--device cuda --dtype bfloat16 --steps 60 --layers 4 --experts 16 --top-k 2 --hidden 1024
      --heads 16 --ffn-hidden 2048 --batch 32 --seq-len 256 --lr 1e-3 --gate-skew 2 --skew-layer 1
      --log-every 10 --data "$root/samples/moe_train/data")
echo "\$ moescope record -o run.%r.moetrace -- moe_train ${args[*]}"
"$bundle/bin/moescope" record -o "$work/run.%r.moetrace" -- "$bundle/bin/moe_train" "${args[@]}" |
  tee "$work/train.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "samples: moe_train exited with $status"; exit "$status"; }
python3 - "$work/train.log" <<'PY'
import re, statistics, sys
rates = [float(m.group(2)) for m in (re.match(r"step (\d+) .* tok/s ([0-9.]+)", l) for l in open(sys.argv[1]))
         if m and int(m.group(1)) >= 10]
print("samples: moe_train bf16 on one GPU: median %.0f tokens/s over %d logged steps" % (statistics.median(rates), len(rates)) if rates else "samples: no step lines")
PY

traces=("$work"/run.*.moetrace)
"$bundle/bin/moescope" info "${traces[@]}" | head -30
"$bundle/bin/moescope" report "${traces[@]}" || { echo "samples: moescope report failed"; exit 1; }
"$bundle/bin/moescope" report --format json -o "$work/report.json" "${traces[@]}" || exit 1
python3 - "$work/report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
layers = {entry["layer"]: entry["max_over_mean"] for entry in report.get("expert_load", [])}
kinds = sorted({f["kind"] for f in report.get("findings", [])})
print("samples: expert max/mean per layer:", {k: round(v, 2) for k, v in sorted(layers.items())})
print("samples: findings:", ", ".join(kinds) or "none")
if 1 not in layers:
    sys.exit("samples: the trace has no expert load for layer 1")
PY
