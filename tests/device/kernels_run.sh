#!/usr/bin/env bash
# One call for tests/device/run.sh: builds the kernels GPU check with nvcc alone, runs it
# (correctness vs CPU references, then the kernels performance table) and the at::_grouped_mm
# timing. Exit status: non-zero when a correctness check failed or the build broke.
# Usage: tests/device/kernels_run.sh [build-dir]   (default build-device)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-device}
status=0
"$root/tests/device/kernels_build.sh" "$build/kernels_device_check" || exit 1
"$build/kernels_device_check" || status=1
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 "$root/tests/device/kernels_grouped_mm.py" || status=1
else
  echo "kernels_run: torch with CUDA not importable, skipping the at::_grouped_mm timing"
fi
exit $status
