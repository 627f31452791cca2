#!/usr/bin/env bash
# Fails when a hot-path kernel spills registers: compiles each CUDA source of moescope_kernels for
# sm_90 with `-Xptxas -v` (no GPU needed) and reads ptxas' per-function report
#   "N bytes stack frame, S bytes spill stores, L bytes spill loads"
# Every function must report 0 spill stores and 0 spill loads, and each source that defines a
# __global__ kernel must report at least one entry function (so compiling nothing cannot pass).
#   ptxas_spill_check.sh NVCC KERNELS_DIR           check the kernels
#   ptxas_spill_check.sh --parse < ptxas-output     check one report (used to test this script)
set -euo pipefail

# check_report NAME: reads ptxas -v output on stdin; prints findings, returns 1 on a spill or no
# entry function.
check_report() {
  local name=$1 report entries spills
  report=$(cat)
  entries=$(grep -c "Compiling entry function" <<<"$report" || true)
  spills=$(grep -E "bytes spill stores" <<<"$report" |
           grep -v -E "(^|[^0-9])0 bytes spill stores, 0 bytes spill loads" || true)
  if [ "$entries" -eq 0 ]; then
    echo "$name: ptxas reported no entry function"
    return 1
  fi
  if [ -n "$spills" ]; then
    echo "$name: register spills:"
    grep -B2 -E "bytes spill stores" <<<"$report" | grep -v -E " 0 bytes spill stores, 0 bytes spill loads" || true
    return 1
  fi
  echo "$name: $entries entry functions, no spills"
}

if [ "${1:-}" = --parse ]; then
  check_report stdin
  exit
fi

nvcc=$1 kernels=$2
status=0
for source in "$kernels"/src/*.cu; do
  grep -q "__global__" "$source" || { echo "$(basename "$source"): no kernels"; continue; }
  report=$("$nvcc" -std=c++17 -gencode arch=compute_90,code=sm_90 -Xptxas -v \
    -DMOESCOPE_KERNELS_HAVE_CUDA=1 -I"$kernels/include" -I"$kernels/src" \
    -c "$source" -o /dev/null 2>&1) || { echo "$report"; echo "$source: nvcc failed"; exit 1; }
  check_report "$(basename "$source")" <<<"$report" || status=1
done
exit $status
