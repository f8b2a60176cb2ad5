#!/usr/bin/env bash
# Where a tool call's seconds go on a bare GPU machine, from the repo root (.whl carried):
#   GATE_COMMIT=<sha> bash bench/h200_profile.sh                        # tools first phases startup ncu (~6 min)
#   GATE_COMMIT=<sha> STEPS="latency" bash bench/h200_profile.sh        # compile latency, shim off/on (~5 min)
# STEPS (any of, in this order):
#   tools     bench/tool_seconds.py on the shipped best: compile_kernel unchanged and of a kernel-only edit,
#             benchmark of the compiled kernel THINK s (10) after the last call returned (a model's turn)
#   first     a new host's first benchmark THINK s after a run's start (a cache of its own: no reference
#             medians, no builds), then the next one
#   phases    bench/eval_phases.py on a new host's cache: each worker message of the first evaluations stamped
#   startup   bench/cuda_startup.py: import torch, a CUDA context fresh and forked, cuBLAS, the profiler
#   breakdown bench/timing_breakdown.py: each step of the candidate's timing loop
#   ncu       `agent profile` of the shipped best (Nsight Compute digest per kernel)
#   latency   bench/compile_latency.py twice, each in an empty cache: shim off (torch's plain build), shim on
# Writes under $OUT: profile.txt and one .json (and .txt) per step.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
exec > >(tee "$OUT/profile.txt") 2>&1
. bench/h200_lib.sh && h200_setup
STEPS=${STEPS:-tools first phases startup ncu}
THINK=${THINK:-10}
P=problems/selective_scan.yaml
has() { [[ " $STEPS " == *" $1 "* ]]; }
machine_facts
step_done install

if has tools; then
  timeout 200 python3 -m bench.tool_seconds $P $SOL/best.py --runs ${RUNS:-5} --think "$THINK" --cold 0 \
    --json "$OUT/tool_seconds.json" 2>&1 | grep -v Warning | tail -12
  step_done tools
fi
if has first; then
  KERNEL_AGENT_CACHE=/tmp/kacache-new-host timeout 150 python3 -m bench.tool_seconds $P $SOL/best.py --runs 2 \
    --think "$THINK" --first-think "$THINK" --cold 0 --no-compiles --json "$OUT/first_benchmark.json" 2>&1 \
    | grep -v Warning | tail -6
  step_done first
fi
if has phases; then
  KERNEL_AGENT_CACHE=/tmp/kacache-new-host2 timeout 120 python3 bench/eval_phases.py $P $SOL/best.py --repeat 2 \
    --json "$OUT/eval_phases.json" 2>&1 | grep -v Warning > "$OUT/eval_phases.txt"
  head -40 "$OUT/eval_phases.txt"
  step_done phases
fi
if has startup; then
  timeout 120 python3 bench/cuda_startup.py --json "$OUT/cuda_startup.json" 2>&1 | tail -20
  step_done startup
fi
if has breakdown; then
  timeout 150 python3 bench/timing_breakdown.py $P $SOL/best.py --json "$OUT/timing_breakdown.json" 2>&1 \
    | grep -v Warning | tail -30
  step_done breakdown
fi
if has ncu; then
  timeout 150 agent profile $P $SOL/best.py > "$OUT/ncu_best.txt" 2>&1
  echo "agent profile: exit $?"; head -40 "$OUT/ncu_best.txt"
  step_done ncu
fi
if has latency; then
  rm -rf /tmp/lat-before /tmp/lat-after
  KERNEL_AGENT_COMPILER_SHIM=0 timeout 280 python3 bench/compile_latency.py --runs ${LATENCY_RUNS:-2} \
    --cache /tmp/lat-before --label "before: torch's plain build (KERNEL_AGENT_COMPILER_SHIM=0)" \
    --json "$OUT/latency_before.json"
  timeout 280 python3 bench/compile_latency.py --runs $(( ${LATENCY_RUNS:-2} + 1 )) --cache /tmp/lat-after \
    --label "after: precompiled header + object cache" --json "$OUT/latency_after.json"
  du -sh /tmp/lat-before /tmp/lat-after
  step_done latency
fi
echo "took $(elapsed) s"
