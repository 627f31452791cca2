#!/usr/bin/env bash
# Builds, with g++ alone (the GPU machine has no CMake packages, zstd-dev, CLI11 or nlohmann:
# tests/device/prepare.sh copies their headers into .device/include), what the capture check
# needs:
#   BUILD/lib/libmoescope_inject.so   the LD_PRELOAD shim (shim core, NVTX, CUPTI, NCCL)
#   BUILD/capture_verify              reads the traces and checks them
#   BUILD/bin/moescope                the CLI (`moescope record`), best effort: when it does
#                                     not build, capture_run.sh sets the shim's environment itself
# Usage: tests/device/capture_build.sh [BUILD]   (default build-device)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(mkdir -p "${1:-$root/build-device}" && cd "${1:-$root/build-device}" && pwd)
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
mkdir -p "$build/lib" "$build/bin" "$build/capture_objects/shim" "$build/capture_objects/cli"
includes=(-I"$root/profiler/trace/include" -I"$root/profiler/recorder/include" -I"$root/profiler" -I"$root/profiler/inject"
  -isystem "$root/.device/include" -isystem "$cuda_include")
libs=(-l:libzstd.so.1 -l:libz.so.1 -ldl -lpthread)

# compile OUT_DIR FLAGS... -- SOURCES...: one g++ per source, in parallel.
compile() {
  local out=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  printf '%s\n' "$@" | xargs -P "$(nproc)" -I{} sh -c '
    src="$1"; shift; out="$1"; shift
    exec g++ "$@" -c "$src" -o "$out/$(echo "$src" | tr / _).o"' _ {} "$out" "${flags[@]}"
}

start=$SECONDS
shim_sources=("$root"/profiler/inject/*.cpp "$root"/profiler/recorder/*.cpp "$root"/profiler/trace/*.cpp)
compile "$build/capture_objects/shim" -std=c++20 -O2 -fPIC -fvisibility=hidden "${includes[@]}" -- \
  "${shim_sources[@]}"
g++ -shared -o "$build/lib/libmoescope_inject.so" "$build"/capture_objects/shim/*.o "${libs[@]}"
echo "capture: built $build/lib/libmoescope_inject.so in $((SECONDS - start)) s"

g++ -std=c++20 -O2 "${includes[@]}" "$root/tests/device/capture_verify.cpp" \
  "$build"/capture_objects/shim/*profiler_trace_*.o -o "$build/capture_verify" "${libs[@]}"
echo "capture: built $build/capture_verify"

start=$SECONDS
cli_sources=("$root"/profiler/cli/*.cpp "$root"/profiler/analysis/*.cpp "$root"/balancer/src/*.cpp
  "$root"/profiler/trace/*.cpp "$root"/profiler/inject/shim_trace_path.cpp)
if compile "$build/capture_objects/cli" -std=c++20 -O2 "${includes[@]}" -I"$root/profiler/cli" \
     -I"$root/profiler/analysis" -I"$root/profiler/analysis/include" -I"$root/runtime/include" -I"$root/balancer/src" -I"$root/balancer/include" \
     -DMOESCOPE_INSTALL_LIBDIR="\"$build/lib\"" -- "${cli_sources[@]}" &&
   g++ -o "$build/bin/moescope" "$build"/capture_objects/cli/*.o "${libs[@]}"; then
  echo "capture: built $build/bin/moescope in $((SECONDS - start)) s"
else
  rm -f "$build/bin/moescope"
  echo "capture: the moescope CLI did not build here; runs use the shim's environment directly"
fi
