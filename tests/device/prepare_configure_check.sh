#!/usr/bin/env bash
# CTest device_build.prepare_configure: tests/device/prepare.sh's configure step, run as a user
# would after `make test`, from a plain shell: no virtual environment active, nothing of the
# project's Python on PATH. It must pick the Makefile's interpreter (scripts/setup.sh
# --print-python), hand it to CMake (MOESCOPE_PYTHON) and configure the preset `device` with
# the build type of build/ (RelWithDebInfo, so ccache hits), or stop with a clear message.
# Usage: prepare_configure_check.sh BUILD_DIR   (configures there; removes nothing else)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:?build folder}
plain=(env -i HOME="${HOME:-/tmp}" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8)
# A fresh clone has its .venv; a worktree that shares another environment names it, as the
# Makefile's own caller does.
if [ ! -x "$root/.venv/bin/python" ] && [ -n "${MOESCOPE_PYTHON:-}" ]; then
  plain+=(MOESCOPE_PYTHON="$MOESCOPE_PYTHON")
fi
# ccache, when the build uses it, keeps its cache where the caller's does.
[ -n "${CCACHE_DIR:-}" ] && plain+=(CCACHE_DIR="$CCACHE_DIR")

expected=$("${plain[@]}" bash "$root/scripts/setup.sh" --print-python)
echo "expected interpreter: $expected"
start=$SECONDS
"${plain[@]}" BUILD_DIR="$build" bash "$root/tests/device/prepare.sh" --configure-only
echo "configure took $((SECONDS - start)) s"

cache=$build/CMakeCache.txt
status=0
grep -qxF "MOESCOPE_PYTHON:FILEPATH=$expected" "$cache" ||
  { echo "FAIL: $cache: $(grep '^MOESCOPE_PYTHON:' "$cache"), expected $expected"; status=1; }
grep -qx 'CMAKE_BUILD_TYPE:STRING=RelWithDebInfo' "$cache" ||
  { echo "FAIL: $(grep '^CMAKE_BUILD_TYPE:' "$cache"), expected RelWithDebInfo (as build/)"; status=1; }
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$cache")
site=$("$expected" -c 'import importlib.util, os; print(os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin)))')
case "$torch_dir" in
  "$site"/*) echo "LibTorch from $torch_dir" ;;
  *) echo "FAIL: Torch_DIR=$torch_dir is not from $expected's torch ($site)"; status=1 ;;
esac
[ $status -eq 0 ] && echo "PASS: prepare.sh configures from a plain shell with $expected"
exit $status
