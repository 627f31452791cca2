#!/usr/bin/env bash
# Builds the kernels GPU check with nvcc alone (no CMake packages, GTest, zstd or CLI11), for the
# GPU machine. Usage: tests/device/kernels_build.sh [output-binary]
#   default output: build-device/kernels_device_check; NVCC and CUDA_ARCH_FLAGS may override.
# Then run: build-device/kernels_device_check [--correctness-only]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
output=${1:-$root/build-device/kernels_device_check}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
arch=${CUDA_ARCH_FLAGS:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
objects=$(dirname "$output")/kernels_objects
mkdir -p "$objects"
sources=("$root"/kernels/src/*.cpp "$root"/kernels/src/*.cu "$root"/tests/device/kernels_check.cu)
# One nvcc per source, in parallel: the GPU machine has 16 cores.
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  src="$1"; obj="$2/$(basename "$src").o"
  exec "$3" -std=c++17 -O3 $4 -DMOESCOPE_KERNELS_HAVE_CUDA=1 -I"$5/kernels/include" -I"$5/kernels/src" \
    -x "$(case "$src" in *.cu) echo cu;; *) echo c++;; esac)" -c "$src" -o "$obj"
' _ {} "$objects" "$nvcc" "$arch" "$root"
"$nvcc" $arch "$objects"/*.o -lcublas -o "$output"
echo "built $output"
