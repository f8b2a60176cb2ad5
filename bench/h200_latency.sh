#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried:
#   bash bench/h200_latency.sh
# Installs the project as bench/h200_evaluator.sh does, then measures compile latency (bench/latency.py) twice,
# each in a fresh empty cache: "before" with the compiler shim off (torch's plain build, what main did) and
# "after" with it on (precompiled torch/extension.h, reused binding objects). Writes to $OUT:
#   gpu.txt, latency_h200_before.json, latency_h200_after.json, latency_h200.txt (the printed summaries).
# About 5 minutes: ~10 cold CUDA builds before, fewer and shorter after. RUNS=2 (default) per variant.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -d .whl ]; then  # the H200's bare machine; elsewhere the current environment is used as it is
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
fi
export PYTHONUNBUFFERED=1 MAX_JOBS=$(nproc)
RUNS=${RUNS:-2}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUT/gpu.txt"
{
  echo "== before: compiler shim off"
  rm -rf /tmp/lat-before /tmp/lat-after
  KERNEL_AGENT_COMPILER_SHIM=0 python3 bench/latency.py --runs "$RUNS" --cache /tmp/lat-before \
    --label "before: torch's plain build (KERNEL_AGENT_COMPILER_SHIM=0)" --json "$OUT/latency_h200_before.json"
  echo "== after: compiler shim on"
  python3 bench/latency.py --runs $((RUNS + 1)) --cache /tmp/lat-after \
    --label "after: precompiled header + object cache" --json "$OUT/latency_h200_after.json"
  du -sh /tmp/lat-before /tmp/lat-after
} 2>&1 | tee "$OUT/latency_h200.txt"
