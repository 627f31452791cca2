#!/usr/bin/env bash
# Run HERE (the CPU machine) before a device call: builds every GPU check and what it runs with
# through CMake (preset `device`: Release, $ORIGIN RPATHs, target device_bundle) and puts them,
# stripped, into .device/ (ignored by git; name it in the device call's `carry`), then:
#   - copies into .device/lib the shared libraries the bundle needs that the GPU machine may
#     lack (anything not glibc/libstdc++ and not from torch or CUDA: libzstd.so.1, ...), found
#     with ldd, so nothing needs compiling there;
#   - writes .device/manifest.txt (commit, torch, CUPTI, programs, the newest glibc symbol the
#     bundle needs) for tests/device/run.sh;
#   - checks that the bundle fits the 64 MiB a device call may carry.
# The Python environment (torch, the NVIDIA wheels' headers) is the Makefile's: the one
# `scripts/setup.sh --print-python` names ($MOESCOPE_PYTHON, else an active environment with
# torch, else the project's .venv), passed to CMake as MOESCOPE_PYTHON and first on PATH, so a
# plain shell after `make test` builds the same thing as `make`.
# Usage: tests/device/prepare.sh [--configure-only]
#   --configure-only  configure build-device/ and stop (the CTest device_build.prepare_configure)
#   BUILD_DIR: the CMake build folder, default build-device; JOBS: compile jobs, default nproc
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${BUILD_DIR:-$root/build-device}
bundle=$root/.device
jobs=${JOBS:-$(nproc)}
max_bundle_bytes=$((60 * 1024 * 1024))  # of the 64 MiB that travel, leave room for the tree
configure_only=0
[ "${1:-}" = --configure-only ] && configure_only=1

python=$(bash "$root/scripts/setup.sh" --print-python)
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  echo "prepare: $python cannot import torch: run \`make\` (scripts/setup.sh) first, or set" \
       "MOESCOPE_PYTHON to an interpreter with the torch wheel" >&2
  exit 1
fi
export PATH=$(dirname "$python"):$PATH
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
echo "prepare: Python $python, torch $torch_version"

start=$SECONDS
# The Python is passed on every run: a cache made with another interpreter is reconfigured.
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake --preset device -B "$build" -DMOESCOPE_DEVICE_BUNDLE_DIR="$bundle" \
    -DMOESCOPE_PYTHON="$python"
else
  cmake "$build" -DMOESCOPE_DEVICE_BUNDLE_DIR="$bundle" -DMOESCOPE_PYTHON="$python" >/dev/null
fi
echo "prepare: configured $build in $((SECONDS - start)) s"
[ "$configure_only" -eq 1 ] && exit 0
if ! cmake --build "$build" --target device_bundle -j "$jobs"; then
  echo "prepare: building the device bundle FAILED (see above); run.sh reports what is missing" >&2
  exit 1
fi
echo "prepare: built the bundle in $((SECONDS - start)) s"

# Third-party libraries the GPU machine may lack: what ldd resolves outside glibc (its own
# libraries must match the machine's loader), libstdc++,
# torch and CUDA. torch/CUDA libraries are not found here for every program (run.sh puts the
# GPU machine's own on LD_LIBRARY_PATH), so "not found" lines are expected and skipped.
system_libraries() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libutil|libresolv|libanl|libmvec|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so' |
    grep -Ev '/(torch|nvidia|cuda[^/]*)/' | grep -v "^$bundle/" || true
}
for library in $(system_libraries "$bundle"/bin/* "$bundle"/lib/*.so*); do
  cp -L "$library" "$bundle/lib/"
  echo "prepare: copied $library into .device/lib"
done

# The newest glibc / libstdc++ symbol versions the bundle needs (the GPU machine's image is
# newer than this Debian 12, so these must not exceed its versions).
needs() { objdump -T "$bundle"/bin/* "$bundle"/lib/*.so* 2>/dev/null | grep -o "$1[0-9.]*" | sort -uV | tail -1; }
cupti_version=$(sed -n 's/^#define CUPTI_API_VERSION //p' \
  "$(sed -n 's/^MOESCOPE_CUPTI_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")/cupti_version.h" 2>/dev/null || true)
{
  echo "commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!.device' || echo ' (with uncommitted changes)')"
  echo "built $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "torch $torch_version"
  echo "cupti ${cupti_version:-unknown}"
  echo "needs $(needs GLIBC_) $(needs GLIBCXX_)"
  echo "programs $(cd "$bundle/bin" && ls | tr '\n' ' ')"
  echo "libraries $(cd "$bundle/lib" && ls | tr '\n' ' ')"
} > "$bundle/manifest.txt"
cat "$bundle/manifest.txt"

bytes=$(du -sb "$bundle" | cut -f1)
echo "prepare: .device is $((bytes / 1024 / 1024)) MiB (carry it: the device call's carry [\".device\"])"
if [ "$bytes" -gt "$max_bundle_bytes" ]; then
  echo "prepare: .device is larger than $((max_bundle_bytes / 1024 / 1024)) MiB: it will not travel" >&2
  exit 1
fi
