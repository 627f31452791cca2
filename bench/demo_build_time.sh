#!/usr/bin/env bash
# How long a new user waits for the first demo: a fresh clone of HEAD, an empty ccache, then
# `make demo` twice (cold, then warm), with the machine's load before and after, and where the
# cold build spent its time (ninja's log, summed per folder). Results: docs/performance.md.
#
#   bench/demo_build_time.sh [WORK_DIR]     (default: a new folder under /tmp)
# Environment: MOESCOPE_PYTHON as for make (default: the clone's own .venv, made by setup).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d /tmp/moescope-demo-time.XXXXXX)}
rm -rf "$work/clone" "$work/ccache"
git clone -q --no-local "$repo" "$work/clone"
git -C "$work/clone" checkout -q "$(git -C "$repo" rev-parse HEAD)"
mkdir -p "$work/ccache"
export CCACHE_DIR="$work/ccache"

timed_demo() {  # NAME: runs `make demo` in the clone, prints its wall time and the load
  local start=$SECONDS load_before
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  make -C "$work/clone" demo >"$work/$1.log" 2>&1 || { tail -30 "$work/$1.log"; exit 1; }
  echo "$1 make demo: $((SECONDS - start)) s (load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg))"
}

echo "commit $(git -C "$repo" rev-parse --short HEAD), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
timed_demo cold
timed_demo warm
python3 - "$work/clone/build/.ninja_log" <<'EOF'
import collections, sys
steps = []
for line in open(sys.argv[1]):
    if not line.startswith("#"):
        start, end, _, output, _ = line.split("\t")
        steps.append((int(start), int(end), output))
print(f"cold build: {len(steps)} steps, {max(end for _, end, _ in steps) / 60000:.1f} min wall")
per_folder = collections.Counter()
for start, end, output in steps:
    per_folder[output.split("/CMakeFiles/")[0] if "/CMakeFiles/" in output else "(links)"] += (end - start) / 1000
for folder, seconds in per_folder.most_common(8):
    print(f"  {seconds:6.0f} s  {folder}")
EOF
echo "logs in $work"
