#!/usr/bin/env bash
# Every NCCL entry point the torch wheel's libtorch_cuda.so imports is either interposed by the
# shim (defined in libmoescope_inject.so) or on the reviewed pass-through list
# (profiler/inject/nccl_passed_through.txt), never both, never neither. A torch upgrade that
# calls a new one (as ncclGroupSimulateEnd and ncclCommShrink were) fails here until someone
# decides whether it changes what the interposer records (group depth, communicators, ops).
# Usage: nccl_entry_points_check.sh LIBTORCH_CUDA SHIM PASS_THROUGH_LIST
set -euo pipefail
torch_cuda=${1:?libtorch_cuda.so}
shim=${2:?libmoescope_inject.so}
list=${3:?nccl_passed_through.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

nm -D --undefined-only "$torch_cuda" | awk '{ print $NF }' | sed 's/@.*//' | grep '^nccl' |
  sort -u > "$work/imported"
nm -D --defined-only "$shim" | awk '{ print $NF }' | sed 's/@.*//' | grep '^nccl' |
  sort -u > "$work/interposed"
sed 's/#.*//' "$list" | awk 'NF { print $1 }' | sort -u > "$work/passed"

[ -s "$work/imported" ] || { echo "FAIL: $torch_cuda imports no nccl* symbol (not a CUDA wheel?)"; exit 1; }
status=0
both=$(comm -12 "$work/interposed" "$work/passed")
if [ -n "$both" ]; then
  echo "FAIL: interposed AND on the pass-through list: $both"; status=1
fi
neither=$(comm -23 "$work/imported" <(sort -u "$work/interposed" "$work/passed"))
if [ -n "$neither" ]; then
  echo "FAIL: libtorch_cuda.so imports these, which the shim neither interposes nor lists as" \
       "passed through ($list):"
  echo "$neither" | sed 's/^/  /'
  status=1
fi
stale=$(comm -13 "$work/imported" "$work/passed")
[ -z "$stale" ] || echo "note: listed as passed through but not imported by this torch: $stale"
echo "libtorch_cuda.so imports $(wc -l < "$work/imported") nccl entry points:" \
     "$(comm -12 "$work/imported" "$work/interposed" | wc -l) interposed," \
     "$(comm -12 "$work/imported" "$work/passed" | wc -l) passed through"
[ $status -eq 0 ] && echo "PASS"
exit $status
