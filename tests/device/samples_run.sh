#!/usr/bin/env bash
# GPU check of the samples (part "samples" of tests/device/run.sh; one H200): builds moe_train
# with g++ against the torch wheel (no CMake packages on the GPU machine), trains it in bf16 on
# one GPU under `moescope record`, prints tokens/s and the bottleneck report.
#
#   tests/device/samples_run.sh [BUILD_DIR]     (default build-device)
# Links the runtime/recorder/kernels objects tests/device/moe_layer_build.sh compiled (building
# them first when they are missing); the moescope CLI and libmoescope_inject.so come from the capture part
# (BUILD_DIR/bin/moescope, BUILD_DIR/lib/libmoescope_inject.so); without them the run is done
# without recording and says so. Exit status non-zero when training fails or the trace lacks
# steps or expert load.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(mkdir -p "${1:-$root/build-device}" && cd "${1:-$root/build-device}" && pwd)
objects=$build/moe_train_objects
runtime_objects=$build/moe_layer_objects
out=$build/samples
mkdir -p "$objects" "$out"
rm -f "$out"/*.moetrace

torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
abi=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
common=(-std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI="$abi" -DUSE_DISTRIBUTED
  -I"$root/runtime/include" -I"$root/profiler/trace/include" -I"$root/profiler/recorder/include" -I"$root/profiler"
  -isystem "$root/.device/include" -isystem "$cuda_include"
  -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include")

# ---- build ----------------------------------------------------------------------------------
start=$SECONDS
# The runtime, balancer, recorder, trace and kernels objects come from the runtime part
# (moe_layer_build.sh compiles every runtime source with the fused-kernel path); build them here
# when that part did not run. Only moe_train's own sources are compiled below.
if ! ls "$runtime_objects"/runtime_src_moe_layer.cpp.o >/dev/null 2>&1; then
  "$root/tests/device/moe_layer_build.sh" "$build/moe_layer_device_check" ||
    { echo "samples: building the runtime objects failed"; exit 1; }
fi
rm -f "$objects"/*.o
for object in "$runtime_objects"/*.o; do
  case "$(basename "$object")" in tests_device_*) ;; *) cp "$object" "$objects/" ;; esac
done
printf '%s\n' "$root"/samples/moe_train/*.cpp | xargs -P "$(nproc)" -I{} sh -c '
  src="$1"; shift; out="$1"; shift
  exec g++ "$@" -c "$src" -o "$out/samples_$(basename "$src").o"' _ {} "$objects" "${common[@]}" \
  -DMOE_TRAIN_HAVE_NCCL=1 -DUSE_C10D_NCCL -DMOE_TRAIN_DEFAULT_DATA_DIR="\"$root/samples/moe_train/data\"" \
  || { echo "samples: compiling moe_train failed"; exit 1; }
cuda_home=${CUDA_HOME:-/usr/local/cuda}
cuda_lib=$cuda_home/lib64
[ -d "$cuda_lib" ] || cuda_lib=$cuda_home/lib
wheel_cuda_lib=$(cd "$torch_dir/.." && pwd)/nvidia/cu13/lib
g++ "$objects"/*.o -o "$build/moe_train" -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" \
  -Wl,-rpath,"$wheel_cuda_lib" -L"$cuda_lib" -Wl,-rpath,"$cuda_lib" \
  -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed -ltorch_cpu -ltorch -lc10 \
  -lcublas -lcudart -l:libzstd.so.1 -l:libz.so.1 -ldl -lpthread ||
  { echo "samples: linking moe_train failed"; exit 1; }
echo "samples: built $build/moe_train in $((SECONDS - start)) s"

# ---- train on one H200, bf16 ------------------------------------------------------------------
args=(--device cuda --dtype bfloat16 --steps 60 --layers 4 --experts 16 --top-k 2 --hidden 1024
      --heads 16 --ffn-hidden 2048 --batch 32 --seq-len 256 --lr 1e-3 --gate-skew 2 --skew-layer 1
      --log-every 10)
moescope=$build/bin/moescope
if [ -x "$moescope" ] && [ -e "$build/lib/libmoescope_inject.so" ]; then
  echo "\$ moescope record -o run.%r.moetrace -- moe_train ${args[*]}"
  "$moescope" record -o "$out/run.%r.moetrace" -- "$build/moe_train" "${args[@]}" | tee "$out/train.log"
  rc=${PIPESTATUS[0]}
  recorded=1
else
  echo "samples: $moescope or libmoescope_inject.so is missing (capture part): training WITHOUT recording"
  "$build/moe_train" "${args[@]}" | tee "$out/train.log"
  rc=${PIPESTATUS[0]}
  recorded=0
fi
[ "$rc" -eq 0 ] || { echo "samples: moe_train failed (exit $rc)"; exit 1; }
python3 - "$out/train.log" <<'EOF'
import re, statistics, sys
rates = [float(m.group(2)) for m in (re.match(r"step (\d+) .* tok/s ([0-9.]+)", l) for l in open(sys.argv[1]))
         if m and int(m.group(1)) >= 10]
print("samples: moe_train bf16 on one GPU: median %.0f tokens/s over %d logged steps" % (statistics.median(rates), len(rates)) if rates else "samples: no step lines")
EOF
[ "$recorded" = 1 ] || exit 1

# ---- report -----------------------------------------------------------------------------------
traces=("$out"/run.*.moetrace)
"$moescope" info "${traces[@]}" | head -30
"$moescope" report "${traces[@]}" || { echo "samples: moescope report failed"; exit 1; }
"$moescope" report --format json -o "$out/report.json" "${traces[@]}" || exit 1
python3 - "$out/report.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
layers = {entry["layer"]: entry["max_over_mean"] for entry in report.get("expert_load", [])}
kinds = sorted({f["kind"] for f in report.get("findings", [])})
print("samples: expert max/mean per layer:", {k: round(v, 2) for k, v in sorted(layers.items())})
print("samples: findings:", ", ".join(kinds) or "none")
if 1 not in layers:
    sys.exit("samples: the trace has no expert load for layer 1")
EOF
