#!/usr/bin/env bash
# Writes the expected `moescope report --format json` and `moescope info` of every trace in
# cases.txt with the given moescope binary (golden_report_test compares the built CLI's with
# them). The expected files were made by the build before the trace schema refactor (issue 27).
#   usage: make_golden.sh MOESCOPE [SHARED_DATA_DIR]   (default: $MOESCOPE_SHARED_DATA)
set -euo pipefail
cli=$(realpath "$1")
shared=${2:-${MOESCOPE_SHARED_DATA:-}}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
grep -v '^#' "$here/cases.txt" | while read -r name folder files; do
  [ -n "$name" ] || continue
  case $folder in
    @shared/*) [ -n "$shared" ] || { echo "skip $name (no shared data)"; continue; }
               dir=$shared/${folder#@shared/} ;;
    *) dir=$root/$folder ;;
  esac
  # Run inside the trace's folder with bare file names: the output holds no machine's paths.
  # shellcheck disable=SC2086
  (cd "$dir" && "$cli" report --format json -q -o "$here/$name.report.json" $files &&
     "$cli" info $files > "$here/$name.info.txt")
  echo "wrote $name"
done
