#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, undefined behaviour fatal) and runs each
# for a bounded time, one after the other.
#   scripts/run_fuzz.sh [SECONDS] [TARGET...]
#   FUZZ_SECONDS_EACH=1800 scripts/run_fuzz.sh 0 fuzz_kineto_import   (a long run of one target)
# SECONDS (default 60) is the total, split between the targets by weight (the two pipelines,
# slowest per input and with the most code behind them, get the most). CI runs
# `make fuzz FUZZ_SECONDS=180`. Corpora persist under build-fuzz/corpus/<target>; inputs that
# crashed are written to build-fuzz/crashes/ and make the script fail. Inputs that found bugs are
# kept as regression tests in tests/fuzz/regressions/<target>/ (run by `make test`).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_trace_reader fuzz_kineto_import fuzz_moetrace_pipeline fuzz_plan_inputs
           fuzz_rank_summary)
fi
build=build-fuzz
generator=""; command -v ninja >/dev/null && generator="-G Ninja"
CC=clang CXX=clang++ cmake -S . -B "$build" $generator -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOESCOPE_BUILD_FUZZ=ON -DMOESCOPE_BUILD_TESTS=OFF -DMOESCOPE_BUILD_BENCH=OFF \
  -DMOESCOPE_WITH_TORCH=OFF -DMOESCOPE_WITH_CUDA=OFF -DMOESCOPE_WITH_VIEWER=OFF >/dev/null
cmake --build "$build" -j 2 --target "${targets[@]}"

# Share of the total per target (percent).
weight() {
  case "$1" in
    fuzz_trace_reader) echo 15 ;;
    fuzz_kineto_import) echo 35 ;;
    fuzz_moetrace_pipeline) echo 35 ;;
    fuzz_plan_inputs) echo 15 ;;
    *) echo 25 ;;
  esac
}
kineto_sources=$(ls ../shared/data/kineto/*.json.gz /work/shared/data/kineto/*.json.gz 2>/dev/null |
                 head -n 3 | tr '\n' ':' || true)
mkdir -p "$build/crashes"
for target in "${targets[@]}"; do
  share=$(( seconds * $(weight "$target") / 100 ))
  [ "$share" -lt 5 ] && share=5
  [ -n "${FUZZ_SECONDS_EACH:-}" ] && share="$FUZZ_SECONDS_EACH"
  corpus="$build/corpus/${target#fuzz_}"
  mkdir -p "$corpus"
  case "$target" in
    fuzz_trace_reader) export MOESCOPE_FUZZ_WRITE_SEEDS="$corpus"; max_len=65536 ;;
    fuzz_kineto_import)
      export MOESCOPE_FUZZ_KINETO_SEEDS="$corpus" MOESCOPE_FUZZ_KINETO_SOURCES="$kineto_sources"
      max_len=16384 ;;
    fuzz_moetrace_pipeline) max_len=8192 ;;
    fuzz_plan_inputs) export MOESCOPE_FUZZ_PLAN_SEEDS="$corpus"; max_len=16384 ;;
    fuzz_rank_summary) export MOESCOPE_FUZZ_SUMMARY_SEEDS="$corpus"; max_len=16384 ;;
  esac
  seeds=()
  [ -d "tests/fuzz/regressions/${target#fuzz_}" ] && seeds=("tests/fuzz/regressions/${target#fuzz_}")
  echo "== $target for ${share}s"
  "$build/fuzz/$target" "$corpus" "${seeds[@]}" -max_total_time="$share" -max_len="$max_len" \
    -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$build/crashes/$target-" \
    2>&1 | tee "$build/$target.log" |
    grep -E "^#[0-9]+.*DONE|^stat::|ERROR|SUMMARY|Test unit written" || true
  if ls "$build/crashes/$target-"* >/dev/null 2>&1; then
    echo "fuzz: $target found a crash: $(ls "$build/crashes/$target-"*)"
    exit 1
  fi
  unset MOESCOPE_FUZZ_WRITE_SEEDS MOESCOPE_FUZZ_KINETO_SEEDS MOESCOPE_FUZZ_KINETO_SOURCES \
    MOESCOPE_FUZZ_PLAN_SEEDS MOESCOPE_FUZZ_SUMMARY_SEEDS
done
echo "fuzz: ${targets[*]} survived (logs: $build/<target>.log)"
