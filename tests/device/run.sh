#!/usr/bin/env bash
# The GPU checks, in one go, on the GPU machine (one H200; must finish in under 8 minutes):
#   kernels    every CUDA op vs its CPU reference, then permute/router/grouped-GEMM figures
#   runtime    MoELayer bf16 vs the loop-over-experts oracle and a dense FFN
#   capture    a torch CUDA program and a 1-rank NCCL communicator under `moescope record`
#   samples    moe_train on one GPU in bf16 under `moescope record`: tokens/s and the report
# Prepare on the CPU machine first: tests/device/prepare.sh (then carry .device).
# Prints each part's output, then a summary table last. Exit status: non-zero if any failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${MOESCOPE_DEVICE_BUILD:-$root/build-device}
mkdir -p "$build"
export PYTHONUNBUFFERED=1

declare -a names statuses seconds
run_part() {  # run_part NAME TIMEOUT_SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  echo "================ $name ================"
  local start=$SECONDS
  if [ ! -e "$1" ] && ! command -v "$1" >/dev/null 2>&1; then
    echo "$name: $1 is missing"
    names+=("$name"); statuses+=("missing"); seconds+=(0)
    return
  fi
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  local status=ok
  [ $rc -eq 124 ] && status="timeout"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status="FAILED ($rc)"
  names+=("$name"); statuses+=("$status"); seconds+=($((SECONDS - start)))
}

echo "================ machine ================"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
nvcc --version | tail -1

run_part kernels 150 tests/device/kernels_run.sh "$build"
run_part runtime 150 bash -c "tests/device/moe_layer_build.sh '$build/moe_layer_device_check' && '$build/moe_layer_device_check'"
run_part capture 120 tests/device/capture_run.sh "$build"
run_part samples 120 tests/device/samples_run.sh "$build"

echo
echo "================ summary ================"
printf '| %-10s | %-14s | %7s |\n' part status seconds
printf '|------------|----------------|---------|\n'
failed=0
for i in "${!names[@]}"; do
  printf '| %-10s | %-14s | %7s |\n' "${names[$i]}" "${statuses[$i]}" "${seconds[$i]}"
  [ "${statuses[$i]}" = ok ] || failed=1
done
exit $failed
