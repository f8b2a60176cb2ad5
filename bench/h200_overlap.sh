#!/usr/bin/env bash
# Issue 27's figures on the H200 in one device call (.whl carried), from the repo root:
#   GATE_COMMIT=<sha> [THINKS="0 10"] bash bench/h200_overlap.sh
# 1. cached builds, 1 and 2 trajectories on one GPU (bench/throughput.py): does the second overlap?
# 2. benchmark(best.py) back to back (think 0; the process's first call included), then 10 s after the
#    previous call returned (a model's turn), through bench/tool_seconds.py.
# Writes $OUT/throughput.{jsonl,txt}, $OUT/tool_seconds_think{0,10}.json and the console logs. ~6 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_setup.sh
SOL=problems/selective_scan/solutions
echo "code: ${GATE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" | tee "$OUT/overlap.txt"
timeout 240 python3 bench/throughput.py problems/selective_scan.yaml --json "$OUT/throughput.jsonl" \
  --minutes 0.8 --cached --candidates 16 --parallel 1,2 --gpus 0 2>&1 | grep -v Warning | tee "$OUT/throughput.txt"
step_done throughput
for think in ${THINKS:-0 10}; do
  runs=$([ "$think" = 0 ] && echo 8 || echo 5)
  timeout 150 python3 -m bench.tool_seconds problems/selective_scan.yaml $SOL/best.py --runs "$runs" \
    --think "$think" --cold 0 --no-compiles --json "$OUT/tool_seconds_think$think.json" 2>&1 | grep -v Warning \
    | tee -a "$OUT/overlap.txt"
  step_done "tool seconds, think $think"
done
