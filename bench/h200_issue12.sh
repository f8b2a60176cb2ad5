#!/usr/bin/env bash
# On the H200 (device tool), with .whl carried: the GPU gate, then, in what is left of one 10-minute call,
# tool seconds per call (bench/tool_seconds.py: compile unchanged, compile of a kernel-only edit, benchmark
# of the compiled best.py). Writes under $OUT: gate.txt, gpu_tests.txt, figures.jsonl, run.txt,
# bench_best.json, tool_seconds_h200.json.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export KERNEL_AGENT_CACHE=/tmp/kacache
OUT="$OUT" bash bench/h200_gate.sh
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 MAX_JOBS=$(nproc) KERNEL_AGENT_FIGURES="$OUT/figures.jsonl"
echo "== tool seconds after $(( $(date +%s) - START )) s"
timeout "$(( 590 - ($(date +%s) - START) ))" python3 -m bench.tool_seconds problems/selective_scan.yaml \
  problems/selective_scan/solutions/best.py --runs ${RUNS:-10} --think ${THINK:-7} --cold 0 \
  --json "$OUT/tool_seconds_h200.json" 2>&1 | grep -v Warning
echo "total $(( $(date +%s) - START )) s"
