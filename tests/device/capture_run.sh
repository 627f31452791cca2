#!/usr/bin/env bash
# GPU check of the capture (part "capture" of tests/device/run.sh; one H200, ~1 minute):
#   1. a torch CUDA program under `moescope record`: kernels, memcpys, allocations and syncs,
#      each kernel/memcpy correlated to its launch API call, GPU times on the host clock
#   2. a 1-rank NCCL communicator (torch.distributed) under `moescope record`: init, three
#      all-reduces and an all-to-all, with GPU start/end times from CUDA events that line up
#      with the CUPTI kernel times
# Usage: tests/device/capture_run.sh [BUILD]   (default build-device; builds with capture_build.sh)
# Needs .device/include from tests/device/prepare.sh. Exit status non-zero if a check failed.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(mkdir -p "${1:-$root/build-device}" && cd "${1:-$root/build-device}" && pwd)
out=$build/capture
mkdir -p "$out"
rm -f "$out"/*.moetrace

"$root/tests/device/capture_build.sh" "$build" || { echo "capture: build failed"; exit 1; }
shim=$build/lib/libmoescope_inject.so

# record TRACE COMMAND...: through the CLI when it built, else the environment it would set.
record() {
  local trace=$1; shift
  if [ -x "$build/bin/moescope" ]; then
    echo "\$ moescope record -o $trace -- $*"
    "$build/bin/moescope" record -o "$trace" -- "$@"
  else
    echo "\$ LD_PRELOAD=$shim CUDA_INJECTION64_PATH=$shim MOESCOPE_OUTPUT=$trace $*"
    LD_PRELOAD="$shim" NVTX_INJECTION64_PATH="$shim" CUDA_INJECTION64_PATH="$shim" \
      MOESCOPE_OUTPUT="$trace" "$@"
  fi
}

failed=0
start=$SECONDS
bytes=$(record "$out/torch.moetrace" python3 "$root/tests/device/capture_torch_program.py" |
  tee "$out/torch.log" | sed -n 's/^CAPTURE_BYTES //p' | tail -1)
cat "$out/torch.log"
echo "capture: torch program done in $((SECONDS - start)) s (tensor bytes: $bytes)"
"$build/capture_verify" torch "$out/torch.moetrace" "${bytes:-0}" || failed=1

start=$SECONDS
bytes=$(record "$out/nccl.moetrace" python3 "$root/tests/device/capture_nccl_program.py" |
  tee "$out/nccl.log" | sed -n 's/^CAPTURE_BYTES //p' | tail -1)
cat "$out/nccl.log"
echo "capture: NCCL program done in $((SECONDS - start)) s (all-reduce bytes: $bytes)"
"$build/capture_verify" nccl "$out/nccl.moetrace" "${bytes:-0}" || failed=1

[ $failed -eq 0 ] && echo "capture: all checks passed" || echo "capture: some checks FAILED"
exit $failed
