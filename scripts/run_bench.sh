#!/usr/bin/env bash
# Runs every benchmark that was built, one after another (each prints its own table with the
# baseline it measured in the same run). Numbers belong in docs/performance.md.
#   scripts/run_bench.sh [BUILD_DIR]
set -uo pipefail
build="${1:-build}"
status=0
for bench in trace_bench nvtx_bench planner_bench analysis_bench viewer_bench moe_layer_bench \
    top_refresh_bench; do
  binary="$build/bin/$bench"
  if [ -x "$binary" ]; then
    echo "== $bench"
    "$binary" || status=1
  else
    echo "== $bench: not built"
  fi
done
exit $status
