#!/usr/bin/env bash
# Builds tests/device/moe_layer_device_check with g++ and nvcc against the torch wheel, without
# CMake packages (the GPU machine has torch + CUDA but no Debian dev packages). Compiled here:
# every runtime source but the Gloo group, the balancer core, the recorder and trace library (the
# runtime's trace calls), and moescope_kernels with its CUDA launchers (the runtime's fused-kernel
# path, MOESCOPE_RUNTIME_FUSED_KERNELS). zstd.h, zlib.h and nlohmann/json.hpp come from the system
# or from an ignored .device/include in the tree (tests/device/prepare.sh).
# Usage: tests/device/moe_layer_build.sh [output-binary]   (default build-device/moe_layer_device_check)
#   JOBS (default nproc), NVCC and CUDA_ARCH_FLAGS may override.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
output=${1:-$root/build-device/moe_layer_device_check}
objects=$(dirname "$output")/moe_layer_objects
mkdir -p "$objects"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cuda_include=${CUDA_INCLUDE:-$cuda_home/include}
nvcc=${NVCC:-$(command -v nvcc || echo "$cuda_home/bin/nvcc")}
arch=${CUDA_ARCH_FLAGS:-"-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"}
jobs=${JOBS:-$(nproc)}
common=(-std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" -DUSE_DISTRIBUTED
  -DMOESCOPE_KERNELS_HAVE_CUDA=1 -DMOESCOPE_RUNTIME_FUSED_KERNELS=1
  -I"$root/runtime/include" -I"$root/balancer/include" -I"$root/balancer/src" -I"$root/profiler/trace/include" -I"$root/profiler/recorder/include" -I"$root/profiler"
  -I"$root/kernels/include" -I"$root/kernels/src"
  -isystem "$root/.device/include" -isystem "$cuda_include"
  -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include")
sources=()
for src in "$root"/runtime/src/*.cpp; do
  [ "$(basename "$src")" = gloo_group.cpp ] || sources+=("$src")  # needs Gloo's headers
done
sources+=("$root"/balancer/src/*.cpp "$root"/profiler/recorder/*.cpp
  "$root"/profiler/trace/*.cpp "$root"/kernels/src/*.cpp "$root"/kernels/src/*.cu
  "$root"/tests/device/moe_layer_device_check.cpp)
rm -f "$objects"/*.o
# One compiler per source, in parallel; .cu files go to nvcc (C++17, as in kernels/CMakeLists.txt).
printf '%s\n' "${sources[@]}" | xargs -P "$jobs" -I{} sh -c '
  src="$1"; shift; out="$1"; shift; nvcc="$1"; shift; arch="$1"; shift; root="$1"; shift
  obj="$out/$(echo "${src#"$root"/}" | tr / _).o"
  case "$src" in
    *.cu) exec "$nvcc" -std=c++17 -O3 $arch -Xcompiler -fPIC -DMOESCOPE_KERNELS_HAVE_CUDA=1 \
            -I"$root/kernels/include" -I"$root/kernels/src" -c "$src" -o "$obj" ;;
    *) exec g++ "$@" -c "$src" -o "$obj" ;;
  esac' _ {} "$objects" "$nvcc" "$arch" "$root" "${common[@]}"
cuda_lib=$cuda_home/lib64
[ -d "$cuda_lib" ] || cuda_lib=$cuda_home/lib
# At run time prefer the cuBLAS/cudart the torch wheel loads (nvidia/cu13/lib), so that the
# kernels' cuBLAS calls and torch's share one libcublas; the toolkit's is the fallback.
wheel_cuda_lib=$(cd "$torch_dir/.." && pwd)/nvidia/cu13/lib
g++ "$objects"/*.o -o "$output" -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" \
  -Wl,-rpath,"$wheel_cuda_lib" -L"$cuda_lib" -Wl,-rpath,"$cuda_lib" \
  -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed -ltorch_cpu -ltorch -lc10 \
  -lcublas -lcudart -l:libzstd.so.1 -l:libz.so.1 -ldl -lpthread
echo "built $output"
