#!/usr/bin/env bash
# Builds tests/device/moe_layer_device_check with g++ against the torch wheel, without CMake
# packages (the GPU machine has torch + CUDA but no Debian dev packages). The runtime's recorder
# calls need libmoescope_recorder: its sources are compiled here too; zstd.h, zlib.h and
# nlohmann/json.hpp come from the system or from an ignored .device/include in the tree.
# Usage: tests/device/moe_layer_build.sh [output-binary]   (default build-device/moe_layer_device_check)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
output=${1:-$root/build-device/moe_layer_device_check}
objects=$(dirname "$output")/moe_layer_objects
mkdir -p "$objects"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
common=(-std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" -DUSE_DISTRIBUTED
  -I"$root/runtime/include" -I"$root/profiler/include" -I"$root/profiler"
  -isystem "$root/.device/include" -isystem "$cuda_include"
  -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include")
sources=("$root"/runtime/src/moe_config.cpp "$root"/runtime/src/router.cpp
  "$root"/runtime/src/token_dispatcher.cpp "$root"/runtime/src/grouped_experts.cpp
  "$root"/runtime/src/expert_parallel.cpp "$root"/runtime/src/routing_replay.cpp
  "$root"/runtime/src/moe_instrumentation.cpp "$root"/runtime/src/moe_layer.cpp
  "$root"/profiler/recorder/*.cpp "$root"/profiler/trace/*.cpp
  "$root"/tests/device/moe_layer_device_check.cpp)
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  src="$1"; shift; out="$1"; shift
  exec g++ "$@" -c "$src" -o "$out/$(basename "$src").o"' _ {} "$objects" "${common[@]}"
g++ "$objects"/*.o -o "$output" -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" \
  -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed -ltorch_cpu -ltorch -lc10 \
  -l:libzstd.so.1 -l:libz.so.1 -ldl -lpthread
echo "built $output"
