#!/usr/bin/env bash
# Many ranks from summaries (docs/performance.md, "Thousands of ranks"): for each rank count,
# writes a synthetic MoE job (bench/moe_job_traces: 100 steps, a rank slower by 18% from step
# 60, a host slower by 10%, a hot expert), summarizes every trace with `moescope summarize`
# fanned out by xargs, then times `moescope report` from the summaries (and from the full
# traces, --detail, up to 1,024 ranks) with its peak memory, and checks the planted problems
# are named; then opens the viewer's job overview on the summaries (bench/overview_bench, the
# model alone, and `moescope-view FOLDER --screenshot` under xvfb-run, the window: time to the
# written PNG). Baseline in the same run: the full-trace report.
#   bench/many_ranks_bench.sh [BUILD_DIR] [RANKS...]        (default: build 64 1024 4096)
set -euo pipefail
build="${1:-build}"
shift || true
counts=("$@")
[ ${#counts[@]} -eq 0 ] && counts=(64 1024 4096)
cli="$build/bin/moescope"
generator="$build/bin/moe_job_traces"
work="${MOESCOPE_BENCH_DIR:-$(mktemp -d)}"
jobs="$(nproc)"
group() { echo "$1" | sed ':a;s/\B[0-9]\{3\}\>/,&/;ta'; }  # 2053 -> 2,053, as reports write
measure() {  # measure OUT COMMAND...: wall seconds and peak RSS (MB) of COMMAND into OUT.time
  local out="$1"
  shift
  /usr/bin/time -f "%e %M %U %S" -o "$out.time" "$@" > "$out" 2> "$out.err"
  awk '{printf "%.2f s wall (%.2f s CPU), %.0f MB", $1, $3 + $4, $2 / 1024}' "$out.time"
}
echo "| ranks | events | summarize (xargs -P $jobs) | summaries | report from summaries | report from traces (--detail) | found | overview (model) | overview (window) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for ranks in "${counts[@]}"; do
  dir="$work/job$ranks"
  rm -rf "$dir"
  slow_rank=$(( ranks / 2 + 5 ))
  slow_host=$(( ranks / 16 ))
  [ "$slow_host" -eq "$(( slow_rank / 8 ))" ] && slow_host=$(( slow_host + 1 ))
  "$generator" --dir "$dir" --ranks "$ranks" --steps 100 --slow-rank "$slow_rank" \
    --slow-from 60 --slow-host "$slow_host" > "$dir.generate"
  events=$(grep -o '[0-9.]* M events' "$dir.generate" | head -1)
  start=$(date +%s.%N)
  ls "$dir"/job.*.moetrace | xargs -P "$jobs" -n 64 "$cli" summarize -q
  summarize_s=$(echo "$(date +%s.%N) - $start" | bc)
  summary_kb=$(du -sk --apparent-size "$dir"/*.moesummary 2>/dev/null | awk '{s += $1} END {print s}')
  from_summaries=$(measure "$dir.report_summaries" "$cli" report -q "$dir"/job.*.moesummary)
  from_traces="-"
  if [ "$ranks" -le 1024 ]; then
    from_traces=$(measure "$dir.report_traces" "$cli" report -q --detail "$dir"/job.*.moetrace)
  fi
  overview_model="-"
  overview_window="-"
  if [ -x "$build/bin/overview_bench" ]; then
    overview_model=$(measure "$dir.overview" "$build/bin/overview_bench" "$dir")
  fi
  if [ -x "$build/bin/moescope-view" ] && command -v xvfb-run > /dev/null; then
    overview_window=$(measure "$dir.view" xvfb-run -a -s '-screen 0 1280x1024x24' \
      "$build/bin/moescope-view" "$dir" --screenshot "$dir.overview.png" --size 1600x1000)
  fi
  report="$dir.report_summaries"
  found=""
  grep -q "rank $(group "$slow_rank") slower by 1[0-9]% from step 60" "$report" &&
    found+="rank $slow_rank from step 60; "
  grep -q "host node-$(printf %03d "$slow_host")" "$report" && found+="host node-$(printf %03d "$slow_host"); "
  grep -q "layer 1, expert 17" "$report" && found+="layer 1 expert 17"
  printf "| %s | %s | %.1f s | %.0f KB (%.1f KB/rank) | %s | %s | %s | %s | %s |\n" "$ranks" \
    "$events" "$summarize_s" "$summary_kb" "$(echo "$summary_kb / $ranks" | bc -l)" \
    "$from_summaries" "$from_traces" "${found:-NOTHING}" "$overview_model" "$overview_window"
  grep "summary of rank 0" "$dir.generate" || true
done
echo "(work folder: $work; load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
