#!/usr/bin/env bash
# Parts "capture" and "nccl" of tests/device/run.sh (one H200, under a minute each): a program
# under `moescope record` (the CLI preloads the shim), then capture_verify on its trace.
#   capture   a torch CUDA program: kernels, memcpys, allocations and syncs, each kernel/memcpy
#             correlated to its launch API call, GPU times on the host clock
#   nccl      a 1-rank NCCL communicator (torch.distributed): init, three all-reduces and an
#             all-to-all, GPU start/end times from CUDA events that line up with CUPTI's kernels;
#             the C++ torch capture (libmoescope_torch_capture.so) records c10d's collectives;
#             a fourth all-reduce held 2 s on the GPU gets a collective_open record
#   graph     a step (matmul + all-reduce) captured with torch.cuda.graph and replayed
#   restart   a second recording in the same process after CUDA is up; the exit flush order
#   profiler  the program's own torch.profiler (CUDA activities) next to moescope's CUPTI
# Usage: tests/device/capture_run.sh capture|nccl|graph|restart|profiler BUNDLE WORK_DIR
#   BUNDLE: what tests/device/prepare.sh built (bin/moescope, bin/capture_verify, lib/ shims)
# Exit status: 0 all checks passed, 77 no CUDA device, else a failure.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=${1:?usage: capture_run.sh capture|nccl|graph|restart|profiler BUNDLE WORK_DIR}
bundle=${2:?bundle folder}
work=${3:?work folder}
case "$mode" in
  capture) program=$root/tests/device/capture_torch_program.py verify_mode=torch ;;
  nccl) program=$root/tests/device/capture_nccl_program.py verify_mode=nccl ;;
  graph) program=$root/tests/device/capture_graph_program.py verify_mode=graph ;;
  restart) program=$root/tests/device/capture_restart_program.py verify_mode=restart ;;
  profiler) program=$root/tests/device/capture_profiler_program.py verify_mode=profiler ;;
  *) echo "capture_run.sh: unknown part '$mode' (expected capture, nccl, graph, restart or" \
          "profiler)" >&2; exit 2 ;;
esac
for needed in "$bundle/bin/moescope" "$bundle/bin/capture_verify" "$bundle/lib/libmoescope_inject.so"; do
  [ -e "$needed" ] || { echo "capture_run.sh: $needed is missing (run tests/device/prepare.sh)"; exit 3; }
done
mkdir -p "$work"
trace=$work/$mode.moetrace
rm -f "$work"/*.moetrace
arguments=()
if [ "$mode" = restart ]; then  # the program restarts the recording into the second trace
  arguments=("$work/$mode.second.moetrace")
fi

echo "\$ moescope record -o $trace -- python3 $program ${arguments[*]}"
stdbuf -oL -eL "$bundle/bin/moescope" record -o "$trace" -- python3 "$program" "${arguments[@]}" |
  tee "$work/$mode.program.log"
status=${PIPESTATUS[0]}
[ "$mode" = restart ] && trace=$work/$mode.second.moetrace
if [ "$status" -ne 0 ]; then
  echo "$mode: the program exited with $status"
  # Also then: what the shim recorded, and why there is no GPU activity (no driver, ...).
  [ -f "$trace" ] && "$bundle/bin/moescope" info "$trace" | grep -E '^ *(gpu|capture|events)' | head -5
  exit "$status"
fi
bytes=$(sed -n 's/^CAPTURE_BYTES //p' "$work/$mode.program.log" | tail -1)
"$bundle/bin/moescope" info "$trace" | head -20
"$bundle/bin/capture_verify" "$verify_mode" "$trace" "${bytes:-0}"
