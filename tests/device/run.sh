#!/usr/bin/env bash
# The GPU checks, in one go, on the GPU machine (one H200). Runs only: everything was built on
# the CPU machine by tests/device/prepare.sh into .device/ (carry it). Each part has its own
# time limit; together they stay under 8 minutes:
#
#   part        limit  what
#   machine       20s  nvidia-smi, torch and its CUDA, the bundle's manifest
#   kernels       75s  every CUDA op vs its CPU reference, then bandwidth/router/GEMM figures
#   grouped_mm    40s  at::_grouped_mm vs a per-group loop, TFLOP/s vs dense bf16
#   runtime      110s  MoELayer: oracle, fused kernels vs ATen (near-tie routing counted),
#                      tokens/s vs the dense FFN
#   capture       45s  a torch CUDA program under `moescope record` + capture_verify
#   nccl          50s  a 1-rank NCCL communicator under `moescope record` + capture_verify
#   samples       80s  moe_train bf16 under `moescope record`: tokens/s and the report
#   sync          40s  recorded vs plain MoELayer step synchronize the same number of times
#                      (tests/device/sync_count_check.cpp)
#                 ----
#                 460s  (python3 -c 'import torch' alone takes 2-3 s there, 30 s on a busy
#                        2-core CPU machine: the dry run there may hit a limit)
#
# Usage: tests/device/run.sh [OUT_DIR]    (default: $OUT when set, else build-device/run)
# Writes OUT_DIR/summary.md (every part: pass / fail / timeout / no-gpu / missing / not run,
# seconds, key figures), rewritten after every part and on exit, so it is there even when a
# part times out or the script is killed; and OUT_DIR/run.log (all output).
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
exec > >(tee "$out/run.log") 2>&1
export PYTHONUNBUFFERED=1

parts=(machine kernels grouped_mm runtime capture nccl samples sync)
declare -A limit=([machine]=20 [kernels]=75 [grouped_mm]=40 [runtime]=110 [capture]=45 [nccl]=50
                  [samples]=80 [sync]=40)
# Lines of a part's output that go into the summary as its key figures.
declare -A figures=(
  [machine]='^(gpu|torch|bundle|driver|manifest)'
  [kernels]='^\| |correctness failure|FAIL'
  [grouped_mm]='^\| |ok|FAIL'
  [runtime]='routing:|^\| |FAIL|PASS'
  [capture]='^  (ok|FAILED|note) |kernels, .* copies'
  [nccl]='^  (ok|FAILED|note) |NCCL kernels'
  [samples]='^samples: '
  [sync]='sync|FAIL|PASS')
declare -A status seconds
for part in "${parts[@]}"; do status[$part]="not run"; seconds[$part]=""; done
current=""

write_summary() {
  {
    echo "# tests/device/run.sh summary"
    echo
    echo "bundle: $bundle; written $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo
    echo "| part | status | seconds | limit |"
    echo "|---|---|---|---|"
    for part in "${parts[@]}"; do
      echo "| $part | ${status[$part]} | ${seconds[$part]} | ${limit[$part]} |"
    done
    for part in "${parts[@]}"; do
      [ -s "$work/$part.log" ] || continue
      echo
      echo "## $part (${status[$part]})"
      echo
      echo '```'
      grep -E "${figures[$part]}" "$work/$part.log" | head -40
      echo "(last line) $(tail -n 1 "$work/$part.log")"
      echo '```'
    done
  } > "$summary.tmp" && mv "$summary.tmp" "$summary"
}

on_exit() {
  if [ -n "$current" ]; then
    status[$current]="killed"
    seconds[$current]=$((SECONDS - part_start))
  fi
  write_summary
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
  timeout --kill-after=5 "${limit[$name]}" "$@" 2>&1 | tee "$work/$name.log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) status[$name]="pass" ;;
    77) status[$name]="no-gpu" ;;
    124 | 137) status[$name]="timeout" ;;
    3) status[$name]="missing" ;;
    *) status[$name]="fail ($rc)" ;;
  esac
  seconds[$name]=$((SECONDS - part_start))
  current=""
  echo "---- $name: ${status[$name]} in ${seconds[$name]} s"
  write_summary
}

# A part whose program prepare.sh did not put into the bundle.
missing_part() {
  local name=$1 why=$2
  status[$name]="missing"
  seconds[$name]=0
  echo "================ $name ================"
  echo "$name: $why" | tee "$work/$name.log"
  write_summary
}

# ---- environment: the GPU machine's own torch and CUDA libraries ------------------------------
# The bundle was linked against the torch wheel of the CPU machine (the same version, checked
# below); its libraries are found through LD_LIBRARY_PATH here, CUDA's in the wheel's
# nvidia/cu13/lib first (the copies torch itself loads), then the toolkit's.
python_paths=$(python3 - <<'PY' 2>/dev/null
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
run_part grouped_mm python3 "$root/tests/device/kernels_grouped_mm.py"
run_part runtime "$bundle/bin/moe_layer_device_check"
run_part capture "$root/tests/device/capture_run.sh" capture "$bundle" "$work/capture"
run_part nccl "$root/tests/device/capture_run.sh" nccl "$bundle" "$work/nccl"
run_part samples "$root/tests/device/samples_run.sh" "$bundle" "$work/samples"
if [ -x "$bundle/bin/sync_count_check" ]; then
  run_part sync "$bundle/bin/sync_count_check"
else
  missing_part sync "bin/sync_count_check is not in the bundle: rerun prepare.sh"
fi

echo
echo "================ summary ($summary) ================"
write_summary
sed -n '/^| part/,/^$/p' "$summary"
result=0
for part in "${parts[@]}"; do
  case "${status[$part]}" in
    pass | "not merged") ;;
    no-gpu) [ $result -eq 0 ] && result=77 ;;
    *) result=1 ;;
  esac
done
exit $result
