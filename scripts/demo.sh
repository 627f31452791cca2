#!/usr/bin/env bash
# The moescope demo (`make demo` runs it after setup + build): trains the sample MoE language
# model on 2 CPU ranks under `moescope record` with a deliberately skewed router, prints the
# bottleneck report, exports Chrome trace JSON, renders viewer screenshots, then trains again
# with aux-loss-free balancing and once more with dynamic expert placement (redundant experts
# and periodic rebalancing), and compares the expert load.
#
#   scripts/demo.sh [BUILD_DIR]          (default: build)
# Environment (for quick runs and tests):
#   MOESCOPE_DEMO_OUT     output folder (default: demo-output)
#   MOESCOPE_DEMO_STEPS   training steps per run (default: 200)
#   MOESCOPE_DEMO_SKEW    router logit skew on layer 1 (default: 3)
#   MOESCOPE_DEMO_SMALL=1 a smaller model (tests)
#   MOESCOPE_DEMO_NO_VIEWER=1  skip the screenshots
# Exit status: 0 when training, recording and the report worked; parts that are not built
# (viewer) are reported as missing, not failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || { echo "demo: build folder ${1:-build} does not exist (run make build)" >&2; exit 2; }
out=${MOESCOPE_DEMO_OUT:-$root/demo-output}
steps=${MOESCOPE_DEMO_STEPS:-200}
skew=${MOESCOPE_DEMO_SKEW:-3}
python=${PYTHON:-${MOESCOPE_PYTHON:-python3}}
moescope=$build/bin/moescope
moe_train=$build/bin/moe_train

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
missing() { printf 'demo: MISSING: %s\n' "$*" >&2; }

# ---- what is there ------------------------------------------------------------------------
[ -x "$moescope" ] || { missing "$moescope (the moescope CLI is not built: run make build)"; exit 1; }
[ -x "$moe_train" ] || { missing "$moe_train (needs LibTorch: run make setup, then make build)"; exit 1; }
[ -e "$build/lib/libmoescope_inject.so" ] || { missing "$build/lib/libmoescope_inject.so (capture shim; moescope record cannot work)"; exit 1; }
"$python" -c 'import torch.distributed.run' 2>/dev/null || { missing "python3 with torch (torchrun launches the 2 ranks): run make setup"; exit 1; }
have_command() { "$moescope" "$1" --help >/dev/null 2>&1; }
have_report=1; have_command report || { have_report=0; missing "moescope report (analysis not built into this moescope)"; }
have_export=1; have_command export || { have_export=0; missing "moescope export (analysis not built into this moescope)"; }
have_viewer=1
if [ "${MOESCOPE_DEMO_NO_VIEWER:-0}" = 1 ]; then
  have_viewer=0
elif [ ! -x "$build/bin/moescope-view" ]; then
  have_viewer=0; missing "$build/bin/moescope-view (viewer not built: needs libimgui-dev, libglfw3-dev)"
fi

rm -rf "$out"
mkdir -p "$out/skewed" "$out/aux_free" "$out/rebalanced"

if [ "${MOESCOPE_DEMO_SMALL:-0}" = 1 ]; then
  model=(--layers 2 --experts 4 --top-k 2 --hidden 32 --heads 4 --ffn-hidden 64 --batch 8 --seq-len 32 --lr 1e-2)
else
  model=(--layers 2 --experts 8 --top-k 2 --hidden 64 --heads 4 --ffn-hidden 128 --batch 16 --seq-len 64 --lr 3e-3)
fi
common=("${model[@]}" --steps "$steps" --threads 1 --gate-skew "$skew" --skew-layer 1
        --log-every $(( steps >= 100 ? 10 : 5 )))

free_port() {  # a port P with P and P+1 free (moe_train's Gloo store takes MASTER_PORT + 1)
  "$python" - <<'EOF'
import socket
for _ in range(50):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", port + 1)); print(port); break
    except OSError:
        pass
    finally:
        a.close(); b.close()
EOF
}

# train NAME ARGS...: moe_train on 2 CPU ranks (torchrun) under moescope record.
train() {
  local name=$1; shift
  local port; port=$(free_port)
  local cmd=("$moescope" record -o "$out/$name/run.%r.moetrace" --
             "$python" -m torch.distributed.run --no-python --nproc_per_node 2
             --master_addr 127.0.0.1 --master_port "$port" "$moe_train" "${common[@]}" "$@")
  echo "\$ ${cmd[*]}" | sed "s#$build#BUILD#g; s#$out#OUT#g"
  local start=$SECONDS
  OMP_NUM_THREADS=1 "${cmd[@]}" 2>&1 | grep -v -e '^\*\*\*\*' -e 'OMP_NUM_THREADS environment variable' \
    | tee "$out/$name/train.log"
  local rc=${PIPESTATUS[0]}
  echo "($name: $((SECONDS - start)) s, exit $rc)"
  return "$rc"
}

# The per-rank traces (the torchrun launcher writes a run.norank.PID.moetrace of its own).
rank_traces() { ls "$out/$1"/run.[0-9]*.moetrace 2>/dev/null; }

report_run() {  # RUN WHAT TRACE... -> $out/RUN/report.json and report.txt (when report is built)
  local run=$1 what=$2
  shift 2
  [ $have_report = 1 ] || return 0
  "$moescope" report --format json -o "$out/$run/report.json" "$@" ||
    echo "demo: moescope report on $what failed" >&2
  "$moescope" report "$@" > "$out/$run/report.txt" 2>&1 || true
}

report_value() {  # FILE LAYER FIELD -> that layer's field in the JSON report ("-" when null)
  "$python" - "$1" "$2" "$3" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
for layer in report.get("expert_load", []):
    if int(layer.get("layer", -1)) == int(sys.argv[2]):
        value = layer.get(sys.argv[3])
        print("%.2f" % float(value) if value is not None else "-"); break
else:
    print("n/a")
EOF
}

last_logged_max_over_mean() {  # LOG LAYER -> max/mean of the layer on the last logged step
  grep -E '^step [0-9]+ ' "$1" | tail -1 | sed -E "s/.* L$2 ([0-9.]+).*/\1/"
}

# ---- 1. skewed router, no balancing ----------------------------------------------------------
say "1/6 Training moe_train on 2 CPU ranks under moescope record (router skewed on layer 1, no balancing)"
train skewed --balance none || { echo "demo: training under moescope record failed" >&2; exit 1; }
mapfile -t skewed_traces < <(rank_traces skewed)
[ "${#skewed_traces[@]}" -eq 2 ] || { echo "demo: expected 2 rank traces in $out/skewed, found ${#skewed_traces[@]}" >&2; exit 1; }
ls -l "${skewed_traces[@]}" | awk '{print $5, $9}' | sed "s#$out#OUT#g"

# ---- 2. report ---------------------------------------------------------------------------------
say "2/6 Bottleneck report (moescope report)"
if [ $have_report = 1 ]; then
  "$moescope" report "${skewed_traces[@]}" | tee "$out/skewed/report.txt"
  "$moescope" report --format json -o "$out/skewed/report.json" "${skewed_traces[@]}" ||
    echo "demo: moescope report --format json failed" >&2
  "$moescope" report --format markdown -o "$out/skewed/report.md" "${skewed_traces[@]}" >/dev/null 2>&1 || true
else
  echo "(skipped: moescope report is missing)"
fi

# ---- 3. Chrome trace ---------------------------------------------------------------------------
say "3/6 Chrome trace JSON for Perfetto / chrome://tracing (moescope export --chrome)"
if [ $have_export = 1 ]; then
  if "$moescope" export --chrome "$out/skewed/trace.json" "${skewed_traces[@]}"; then
    echo "wrote $out/skewed/trace.json ($(du -h "$out/skewed/trace.json" | cut -f1)): open it at https://ui.perfetto.dev"
  else
    echo "demo: moescope export --chrome failed" >&2
  fi
else
  echo "(skipped: moescope export is missing)"
fi

# ---- 4. viewer screenshots ---------------------------------------------------------------------
say "4/6 Viewer screenshots (moescope view --screenshot)"
if [ $have_viewer = 1 ]; then
  run_view() {
    if [ -n "${DISPLAY:-}" ]; then
      "$moescope" view "$@"
    elif command -v xvfb-run >/dev/null 2>&1; then
      xvfb-run -a -s "-screen 0 1600x900x24" "$moescope" view "$@"
    else
      echo "demo: no display and no xvfb-run (apt-get install xvfb): screenshots skipped" >&2
      return 1
    fi
  }
  for panel in timeline experts report; do
    if run_view "${skewed_traces[@]}" --screenshot "$out/skewed/viewer-$panel.png" --panel "$panel" >/dev/null 2>&1; then
      echo "wrote $out/skewed/viewer-$panel.png"
    else
      echo "demo: the $panel screenshot failed" >&2
    fi
  done
else
  echo "(skipped: the viewer is missing)"
fi

# ---- 5. the same run with aux-loss-free balancing --------------------------------------------
say "5/6 The same run with aux-loss-free balancing (--balance aux-free)"
train aux_free --balance aux-free --bias-update-rate 1e-2 || { echo "demo: the aux-free run failed" >&2; exit 1; }
mapfile -t balanced_traces < <(rank_traces aux_free)
report_run aux_free "the aux-free run" "${balanced_traces[@]}"

# ---- 6. the same run with dynamic expert placement -------------------------------------------
say "6/6 The same run with redundant experts and periodic rebalancing (--redundant-experts 2 --rebalance-every N)"
rebalance_every=10
# The imbalance rule applies every plan that balances better, so the demo shows migrations
# within its few steps; each decision still records what the cost rule (moe_train's default)
# would say: predicted gain, replica sync, migration and net, which `moescope report` prints.
train rebalanced --balance none --redundant-experts 2 --rebalance-every "$rebalance_every" --rebalance-threshold 1.05 --dispatch-pool --rebalance-rule imbalance ||
  { echo "demo: the rebalancing run failed" >&2; exit 1; }
mapfile -t rebalanced_traces < <(rank_traces rebalanced)
report_run rebalanced "the rebalancing run" "${rebalanced_traces[@]}"

say "Result"
printf '%-36s %10s %10s %10s\n' "" "skewed" "aux-free" "rebalanced"
printf '%-36s %10s %10s %10s\n' "layer 1 experts max/mean, last step" \
  "$(last_logged_max_over_mean "$out/skewed/train.log" 1)" "$(last_logged_max_over_mean "$out/aux_free/train.log" 1)" \
  "$(last_logged_max_over_mean "$out/rebalanced/train.log" 1)"
if [ $have_report = 1 ] && [ -s "$out/skewed/report.json" ] && [ -s "$out/aux_free/report.json" ] &&
   [ -s "$out/rebalanced/report.json" ]; then
  for layer in 0 1; do
    for field in max_over_mean rank_max_over_mean; do
      label="layer $layer experts max/mean (report)"
      [ $field = rank_max_over_mean ] && label="layer $layer ranks max/mean (report)"
      printf '%-36s %10s %10s %10s\n' "$label" "$(report_value "$out/skewed/report.json" $layer $field)" \
        "$(report_value "$out/aux_free/report.json" $layer $field)" "$(report_value "$out/rebalanced/report.json" $layer $field)"
    done
  done
fi
printf '%-36s %10s %10s %10s\n' "loss, first -> last 5 steps" \
  "$(sed -nE 's/^moe_train: loss ([0-9.]+) -> ([0-9.]+).*/\1->\2/p' "$out/skewed/train.log")" \
  "$(sed -nE 's/^moe_train: loss ([0-9.]+) -> ([0-9.]+).*/\1->\2/p' "$out/aux_free/train.log")" \
  "$(sed -nE 's/^moe_train: loss ([0-9.]+) -> ([0-9.]+).*/\1->\2/p' "$out/rebalanced/train.log")"
echo
echo "rebalancing decisions (rank 0):"
grep -E '^rebalance step' "$out/rebalanced/train.log" | head -8 || echo "  (none)"
if [ $have_report = 1 ]; then
  echo
  echo "aux-free run, expert findings:"
  grep -E 'expert_imbalance|dead_experts|router_collapse' "$out/aux_free/report.txt" || echo "  (no expert findings)"
fi

# ---- diff: skewed vs rebalanced, and what the plan predicted --------------------------------
say "Diff: the skewed run against the rebalanced one (moescope diff), and the plan's predicted gain"
if [ $have_report = 1 ] && have_command diff; then
  # The plan from the skewed run for the rebalanced run's layout (the experts + 2 redundant
  # slots on 2 ranks), with its predicted rank load and step time; the first rebalance comes at step
  # $rebalance_every - 1, so both sides leave those steps out. The prediction is for the run the
  # demo makes: its rebalancer (every $rebalance_every steps, threshold 1.05, the imbalance rule)
  # replayed on the skewed run's loads; a migration moves w_gate_up and w_down.
  # The step time counts every cost (the replicas' gradient all-reduce and the migrations need one
  # expert's bytes: fp32 w_gate_up [2 ffn, hidden] + w_down [hidden, ffn]) and says whether the
  # move pays over a rebalance interval (--advise).
  experts=8 hidden=64 ffn=128
  for ((i = 0; i + 1 < ${#model[@]}; i++)); do
    case "${model[i]}" in
      --experts) experts=${model[i + 1]} ;; --hidden) hidden=${model[i + 1]} ;; --ffn-hidden) ffn=${model[i + 1]} ;;
    esac
  done
  "$moescope" plan --gpus 2 --slots $((experts + 2)) --skip-steps "$rebalance_every" \
    --expert-bytes $((3 * hidden * ffn * 4)) --window "$rebalance_every" --advise --json "$out/skewed/plan.json" \
    --rebalance-every "$rebalance_every" --rebalance-threshold 1.05 --rebalance-rule imbalance --tensors-per-expert 2 \
    "${skewed_traces[@]}" | sed "s#$out#OUT#g" || echo "demo: moescope plan on the skewed run failed" >&2
  predicted=()  # the plan has a prediction when the trace gave a cost model
  grep -q '"prediction"' "$out/skewed/plan.json" 2>/dev/null && predicted=(--predicted "$out/skewed/plan.json")
  "$moescope" diff "${skewed_traces[@]}" --against "${rebalanced_traces[@]}" --skip-steps "$rebalance_every" \
    "${predicted[@]}" | tee "$out/diff.txt" || echo "demo: moescope diff failed" >&2
  "$moescope" diff "${skewed_traces[@]}" --against "${rebalanced_traces[@]}" --skip-steps "$rebalance_every" \
    "${predicted[@]}" --format json -o "$out/diff.json" || true
  if [ $have_viewer = 1 ] && run_view "${skewed_traces[@]}" --against "${rebalanced_traces[@]}" \
       --screenshot "$out/viewer-compare.png" --panel compare >/dev/null 2>&1; then
    echo "wrote $out/viewer-compare.png"
  fi
  echo "Both runs in the viewer: $moescope view ${skewed_traces[*]} --against ${rebalanced_traces[*]}"
else
  echo "(skipped: moescope diff is missing)"
fi

echo
echo "Outputs in $out/. Open the traces in the viewer:"
echo "  $moescope view ${skewed_traces[*]}"
[ $have_viewer = 1 ] || echo "  (the viewer is not built in this tree; see above)"
exit 0
