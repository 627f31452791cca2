#!/usr/bin/env bash
# The GPU checks, in one go, on the GPU machine (one H200). Runs only: everything was built on
# the CPU machine by tests/device/prepare.sh into .device/ (carry it). Each part has its own
# time limit; together they stay under 9 minutes (the device call: timeout_s 570):
#
#   part        limit  what
#   machine       20s  nvidia-smi, torch and its CUDA, the bundle's manifest
#   kernels       60s  every CUDA op vs its CPU reference, then bandwidth/router/GEMM figures
#   grouped_mm    35s  at::_grouped_mm vs a per-group loop, TFLOP/s vs dense bf16
#   runtime       90s  MoELayer: oracle, fused kernels vs ATen (near-tie routing counted),
#                      tokens/s vs the dense FFN
#   python_runtime 40s moescope.runtime swapped into a Qwen3-MoE block: output and gradients
#                      vs Hugging Face's, fp32/bf16, tokens/s ratio (needs transformers there)
#   capture       40s  a torch CUDA program under `moescope record` + capture_verify
#   nccl          45s  a 1-rank NCCL communicator under `moescope record` + capture_verify,
#                      c10d's collectives through the C++ torch capture library
#   graph         40s  a torch.cuda.graph-captured step with an all-reduce, replayed
#   restart       30s  a second recording in one process; the exit flush before CUDA's teardown
#   profiler      35s  the program's own torch.profiler (CUDA) next to moescope's CUPTI
#   samples       70s  moe_train bf16 under `moescope record`: tokens/s and the report
#   sync          35s  recorded vs plain MoELayer step synchronize the same number of times
#                      (tests/device/sync_count_check.cpp)
#                 ----
#                 540s  (python3 -c 'import torch' alone takes 2-3 s there, 30 s on a busy
#                        2-core CPU machine: the dry run there may hit a limit)
#
# Usage: tests/device/run.sh [OUT_DIR]    (default: $OUT when set, else build-device/run)
# Writes into OUT_DIR (at most 4 files, well inside what a device call brings back):
#   summary.md          every part: status, seconds, limit, the reason (no CUDA device, missing
#                       program, last line of a failure) and its key figures; rewritten before and
#                       after every part and on exit, so it is there after a timeout or a kill
#   run.log             all output
#   part-logs.tar.gz    each part's full, line-buffered log (stdbuf -oL), repacked after each part
#   failed-traces.tar.gz  the traces of failed parts, each under 6 MiB, 12 MiB in all
# Environment for the NCCL parts: NCCL_DEBUG=WARN, and NCCL_SOCKET_IFNAME=lo (one rank, no
# network: the bootstrap stays on loopback), both printed; set them to override.
# Python: $MOESCOPE_PYTHON, else the Makefile's choice (scripts/setup.sh --print-python) when it
# has torch, else the machine's python3 (the GPU machine's has torch); first on PATH.
# Exit status: 0 all passed; 77 nothing failed but some part found no CUDA device (the dry run
# on a CPU machine); 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
bundle=${MOESCOPE_DEVICE_BUNDLE:-$root/.device}
out=${1:-${OUT:-$root/build-device/run}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.md
work=$(mktemp -d "${TMPDIR:-/tmp}/moescope-device.XXXXXX")
mkdir -p "$work/logs"
exec > >(tee "$out/run.log") 2>&1
export PYTHONUNBUFFERED=1

# The copy of the tree may have lost its exec bits (a transfer, a checkout): restore them.
chmod +x "$root"/tests/device/*.sh 2>/dev/null  # the .py files run through python3
[ -d "$bundle/bin" ] && chmod +x "$bundle"/bin/* 2>/dev/null

# Python: the Makefile's environment resolution where it has torch, else python3.
python=${MOESCOPE_PYTHON:-}
if [ -z "$python" ]; then
  python=$(bash "$root/scripts/setup.sh" --print-python 2>/dev/null || true)
  if [ -z "$python" ] || ! "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null; then
    python=$(command -v python3 || echo python3)
  fi
fi
export PATH=$(dirname "$python"):$PATH
echo "run.sh: Python $python"

# NCCL: warnings only (a failure says why), and the bootstrap on loopback (one rank, no network).
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
echo "run.sh: NCCL_DEBUG=$NCCL_DEBUG NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME"

parts=(machine kernels grouped_mm runtime python_runtime capture nccl graph restart profiler samples sync)
declare -A limit=([machine]=20 [kernels]=60 [grouped_mm]=35 [runtime]=90 [python_runtime]=40
                  [capture]=40 [nccl]=45
                  [graph]=40 [restart]=30 [profiler]=35 [samples]=70 [sync]=35)
# Lines of a part's output that go into the summary as its key figures.
declare -A figures=(
  [machine]='^(gpu|torch|bundle|driver|manifest)'
  [kernels]='^\| |correctness failure|FAIL'
  [grouped_mm]='^\| |ok|FAIL'
  [runtime]='routing:|^\| |FAIL|PASS'
  [python_runtime]='^  (ok|FAILED) |tokens/s|missing|FAIL|PASS'
  [capture]='^  (ok|FAILED|note) |kernels, .* copies'
  [nccl]='^  (ok|FAILED|note) |NCCL kernels'
  [graph]='^  (ok|FAILED|note) |^graph: |kernels'
  [restart]='^  (ok|FAILED|note) |kernels'
  [profiler]='^  (ok|FAILED|note) |^profiler: |moescope: '
  [samples]='^samples: '
  [sync]='sync|FAIL|PASS')
declare -A status seconds reason
for part in "${parts[@]}"; do status[$part]="not run"; seconds[$part]=""; reason[$part]=""; done
current=""
max_trace_bytes=$((6 * 1024 * 1024))    # one failed part's trace
max_traces_bytes=$((12 * 1024 * 1024))  # all of them

# Why a part ended as it did, in one line for the summary's table.
part_reason() {
  local name=$1 log=$work/logs/$1.log line=""
  [ -f "$log" ] || { echo ""; return; }
  case ${status[$name]} in
    pass) line="" ;;
    no-gpu) line=$(grep -m1 -i 'no CUDA device' "$log") ;;
    *) line=$(grep -v '^[[:space:]]*$' "$log" | grep -v '^---- ' | tail -n 1) ;;
  esac
  line=${line//|/\\|}
  echo "${line:0:110}"
}

# The logs of every part so far, and the traces of the failed ones (size-capped).
pack_results() {
  tar -czf "$out/part-logs.tar.gz.tmp" -C "$work" logs 2>/dev/null &&
    mv "$out/part-logs.tar.gz.tmp" "$out/part-logs.tar.gz"
  local kept=$work/failed-traces total=0 trace bytes part
  rm -rf "$kept"
  mkdir -p "$kept"
  for part in "${parts[@]}"; do
    case ${status[$part]} in pass | no-gpu | "not run" | missing | "not merged") continue ;; esac
    [ -d "$work/$part" ] || continue
    while IFS= read -r trace; do
      bytes=$(stat -c %s "$trace")
      if [ "$bytes" -gt "$max_trace_bytes" ] || [ $((total + bytes)) -gt "$max_traces_bytes" ]; then
        echo "$trace: $bytes bytes, over the cap: not kept" >> "$kept/left-out.txt"
        continue
      fi
      mkdir -p "$kept/$part"
      cp "$trace" "$kept/$part/"
      total=$((total + bytes))
    done < <(find "$work/$part" -name '*.moetrace' -type f 2>/dev/null)
  done
  if [ -n "$(ls -A "$kept" 2>/dev/null)" ]; then
    tar -czf "$out/failed-traces.tar.gz" -C "$work" failed-traces 2>/dev/null
  fi
}

write_summary() {
  {
    echo "# tests/device/run.sh summary"
    echo
    echo "bundle: $bundle; written $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo
    echo "| part | status | seconds | limit | reason |"
    echo "|---|---|---|---|---|"
    for part in "${parts[@]}"; do
      echo "| $part | ${status[$part]} | ${seconds[$part]} | ${limit[$part]} | ${reason[$part]} |"
    done
    echo
    echo "Full logs: part-logs.tar.gz; traces of failed parts: failed-traces.tar.gz."
    for part in "${parts[@]}"; do
      [ -s "$work/logs/$part.log" ] || continue
      echo
      echo "## $part (${status[$part]})"
      echo
      echo '```'
      grep -E "${figures[$part]}" "$work/logs/$part.log" | head -40
      echo "(last line) $(tail -n 1 "$work/logs/$part.log")"
      echo '```'
    done
  } > "$summary.tmp" && mv "$summary.tmp" "$summary"
}

on_exit() {
  if [ -n "$current" ]; then
    status[$current]="killed"
    seconds[$current]=$((SECONDS - part_start))
    reason[$current]="killed: the run was stopped during this part (its log: part-logs.tar.gz)"
  fi
  for part in "${parts[@]}"; do
    [ "${status[$part]}" = "not run" ] && reason[$part]="not reached (the run stopped before it)"
  done
  write_summary
  pack_results
  rm -rf "$work"
}
trap on_exit EXIT
trap 'exit 143' TERM INT

# run_part NAME COMMAND...: runs it under the part's limit; its output goes to the log.
run_part() {
  local name=$1; shift
  if [[ "$1" == /* ]] && [ ! -x "$1" ]; then
    missing_part "$name" "$1 is not in the bundle (tests/device/prepare.sh could not build it?)"
    return
  fi
  current=$name
  part_start=$SECONDS
  status[$name]="running"
  write_summary
  echo "================ $name (limit ${limit[$name]} s) ================"
  # Line-buffered: a timeout or a crash still leaves every line the part printed.
  timeout --kill-after=5 "${limit[$name]}" stdbuf -oL -eL "$@" 2>&1 | tee "$work/logs/$name.log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) status[$name]="pass" ;;
    77) status[$name]="no-gpu" ;;
    124 | 137) status[$name]="timeout" ;;
    3) status[$name]="missing" ;;
    *) status[$name]="fail ($rc)" ;;
  esac
  seconds[$name]=$((SECONDS - part_start))
  [ "${status[$name]}" = timeout ] && echo "$name: stopped at its limit of ${limit[$name]} s" >> "$work/logs/$name.log"
  reason[$name]=$(part_reason "$name")
  current=""
  echo "---- $name: ${status[$name]} in ${seconds[$name]} s"
  write_summary
  pack_results
}

# A part whose program prepare.sh did not put into the bundle.
missing_part() {
  local name=$1 why=$2
  status[$name]="missing"
  seconds[$name]=0
  echo "================ $name ================"
  echo "$name: $why" | tee "$work/logs/$name.log"
  reason[$name]=$why
  write_summary
}

# ---- environment: the GPU machine's own torch and CUDA libraries ------------------------------
# The bundle was linked against the torch wheel of the CPU machine (the same version, checked
# below); its libraries are found through LD_LIBRARY_PATH here, CUDA's in the wheel's
# nvidia/cu13/lib first (the copies torch itself loads), then the toolkit's.
python_paths=$("$python" - <<'PY' 2>/dev/null
import importlib.util, os
torch = importlib.util.find_spec("torch")
nvidia = importlib.util.find_spec("nvidia")
paths = [os.path.join(os.path.dirname(torch.origin), "lib")] if torch else []
for root in (nvidia.submodule_search_locations if nvidia else []):
    paths.append(os.path.join(root, "cu13", "lib"))
print(":".join(p for p in paths if os.path.isdir(p)))
PY
)
export LD_LIBRARY_PATH=${python_paths}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

machine_info() {
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  else
    echo "gpu: no nvidia-smi"
  fi
  echo "bundle: $bundle"
  if [ ! -f "$bundle/manifest.txt" ]; then
    echo "bundle: no manifest.txt: run tests/device/prepare.sh on the CPU machine and carry .device"
    return 3
  fi
  sed 's/^/manifest: /' "$bundle/manifest.txt"
  # One interpreter (importing torch is the slow part): versions, the bundle's torch, a GPU.
  python3 - "$(sed -n 's/^torch //p' "$bundle/manifest.txt")" <<'PY'
import sys
import torch
print("torch:", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if sys.argv[1] and sys.argv[1] != torch.__version__:
    print("torch: the bundle was built against torch", sys.argv[1], "but this machine has", torch.__version__)
if not torch.cuda.is_available():
    print("machine: no CUDA device (torch sees none)")
    sys.exit(77)
print("gpu:", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
PY
}

export -f machine_info
export bundle
run_part machine bash -c machine_info

run_part kernels "$bundle/bin/kernels_device_check"
run_part grouped_mm "$python" "$root/tests/device/kernels_grouped_mm.py"
run_part runtime "$bundle/bin/moe_layer_device_check"
run_part python_runtime env PYTHONPATH="$bundle/share/moescope/python" \
  MOESCOPE_RUNTIME_OPS_LIBRARY="$bundle/lib/libmoescope_runtime_torch_ops.so" \
  "$python" "$root/tests/device/python_runtime_check.py"
for part in capture nccl graph restart profiler; do
  run_part "$part" bash "$root/tests/device/capture_run.sh" "$part" "$bundle" "$work/$part"
done
run_part samples bash "$root/tests/device/samples_run.sh" "$bundle" "$work/samples"
if [ -x "$bundle/bin/sync_count_check" ]; then
  run_part sync "$bundle/bin/sync_count_check"
else
  missing_part sync "bin/sync_count_check is not in the bundle: rerun prepare.sh"
fi

echo
echo "================ summary ($summary) ================"
write_summary
sed -n '/^| part/,/^$/p' "$summary"
pack_results
result=0
for part in "${parts[@]}"; do
  case "${status[$part]}" in
    pass | "not merged") ;;
    no-gpu) [ $result -eq 0 ] && result=77 ;;
    *) result=1 ;;
  esac
done
exit $result
