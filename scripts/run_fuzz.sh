#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a bounded time.
#   scripts/run_fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build-fuzz
generator=""; command -v ninja >/dev/null && generator="-G Ninja"
CC=clang CXX=clang++ cmake -S . -B "$build" $generator -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOESCOPE_BUILD_FUZZ=ON -DMOESCOPE_BUILD_TESTS=OFF -DMOESCOPE_BUILD_BENCH=OFF \
  -DMOESCOPE_WITH_TORCH=OFF -DMOESCOPE_WITH_CUDA=OFF -DMOESCOPE_WITH_VIEWER=OFF >/dev/null
cmake --build "$build" -j 2 --target fuzz_trace_reader
corpus="$build/corpus/trace_reader"
mkdir -p "$corpus"
MOESCOPE_FUZZ_WRITE_SEEDS="$corpus" "$build/fuzz/fuzz_trace_reader" "$corpus" \
  -max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1 2>&1 | tail -n 12
echo "fuzz: trace reader survived ${seconds}s"
