#!/usr/bin/env bash
# The runtime's two rebalance rules on the same runs (docs/performance.md, "Rebalance rules on
# moe_train"; issue 32): for each seed, moe_train on 2 CPU ranks (Gloo) with the demo's model,
# layer 1's router skewed and 2 redundant experts, rebalanced every WINDOW steps, once with the
# cost rule (--rebalance-rule net, the default) and once with the imbalance rule. One row per
# run: decisions applied / planned, the rule's mean predicted net gain of the applied ones, and
# the mean step time of the second half (rank 0's step_ms; the first half holds the warm-up and
# the fits' first samples). Step times on a shared machine are noise beyond about 10%: the
# ratio of the two rules within a seed is what to read.
#   bench/rebalance_rule_bench.sh [BUILD_DIR] [SEEDS] [STEPS]      (default: build 3 80)
# Environment: WINDOW (10).
set -uo pipefail
build=$(cd "${1:-build}" && pwd)
seeds=${2:-3}
steps=${3:-80}
window=${WINDOW:-10}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model=(--layers 2 --experts 8 --top-k 2 --hidden 64 --heads 4 --ffn-hidden 128 --batch 16
       --seq-len 64 --lr 3e-3 --threads 1 --gate-skew 3 --skew-layer 1 --balance none
       --redundant-experts 2 --rebalance-every "$window" --rebalance-threshold 1.05 --dispatch-pool)
run() {  # run LOG SEED RULE
  local port=$((20000 + RANDOM % 20000)) rank
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      OMP_NUM_THREADS=1 timeout 900 "$build/bin/moe_train" "${model[@]}" --steps "$steps" \
      --seed "$2" --rebalance-rule "$3" > "$1.$rank" 2>&1 &
  done
  wait
}
echo "| seed | rule | applied / planned | mean predicted net of the applied (ms/step) | step ms, 2nd half |"
echo "| --- | --- | --- | --- | --- |"
for ((seed = 1; seed <= seeds; seed++)); do
  for rule in net imbalance; do
    log="$work/s$seed.$rule"
    run "$log" "$seed" "$rule"
    awk -v seed="$seed" -v rule="$rule" -v half=$((steps / 2)) '
      /^rebalance step/ && !/not planned/ {
        ++planned
        if ($0 ~ / applied \(/) { ++applied; match($0, /net [-0-9.]+/); net += substr($0, RSTART + 4, RLENGTH - 4) }
      }
      /^step / && $2 >= half { for (i = 1; i <= NF; ++i) if ($i == "step_ms") { sum += $(i + 1); ++n } }
      END {
        printf "| %s | %s | %d / %d | %s | %.1f |\n", seed, rule, applied, planned,
               applied ? sprintf("%+.2f", net / applied) : "-", n ? sum / n : 0
      }' "$log.0"
  done
done
