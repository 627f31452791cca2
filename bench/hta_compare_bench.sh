#!/usr/bin/env bash
# moescope vs HolisticTraceAnalysis on the same N-rank job (docs/performance.md, "Thousands of
# ranks"): a synthetic MoE job (bench/moe_job_traces, 100 steps, planted slow rank and host),
# exported with `moescope export --split-ranks` to one Chrome trace per rank for HTA. Timed, with
# the peak RSS of the whole process tree (HTA parses in a process pool):
#   HTA      TraceAnalysis(trace_dir) + get_temporal_breakdown() on the Chrome traces
#   moescope `moescope report --detail` on the .moetrace files (every event loaded), and
#            `moescope report` from the rank summaries (`moescope summarize` first)
# Like with like: the same events; HTA's breakdown is a subset of what the report computes (its
# agreement with ours is checked by tests/analysis/hta_compare_test.cpp).
#   bench/hta_compare_bench.sh [BUILD_DIR] [RANKS]        (default: build 64)
set -euo pipefail
build="${1:-build}"
ranks="${2:-64}"
here="$(cd "$(dirname "$0")" && pwd)"
python="${MOESCOPE_PYTHON:-python3}"
cli="$build/bin/moescope"
work="${MOESCOPE_BENCH_DIR:-$(mktemp -d)}/hta$ranks"
rm -rf "$work" && mkdir -p "$work/chrome"
"$build/bin/moe_job_traces" --dir "$work/job" --ranks "$ranks" --steps 100 \
  --slow-rank $(( ranks / 2 + 5 )) --slow-from 60 --slow-host 2 | head -1
"$cli" export -q --split-ranks --chrome "$work/chrome/job.json" "$work"/job/job.*.moetrace > /dev/null
echo "traces: $(du -sh "$work/job" | cut -f1) .moetrace, $(du -sh "$work/chrome" | cut -f1) Chrome JSON"
measure() { "$python" "$here/hta/peak_tree_rss.py" "$@"; }
echo "| tool | input | wall, peak RSS |"
echo "| --- | --- | --- |"
echo "| HolisticTraceAnalysis (load + temporal breakdown) | Chrome JSON | $(measure "$python" "$here/hta/hta_temporal_breakdown.py" "$work/chrome") |"
echo "| moescope report --detail | .moetrace | $(measure "$cli" report -q --detail "$work"/job/job.*.moetrace) |"
"$cli" summarize -q "$work"/job/job.*.moetrace
echo "| moescope report (summaries) | .moesummary | $(measure "$cli" report -q "$work"/job/job.*.moetrace) |"
