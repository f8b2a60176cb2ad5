#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried:
#   bash bench/h200_evaluator.sh
# Installs the project as DEVELOPERS.md says, then checks and benchmarks the shipped CUDA solutions
# through the real evaluator (`agent bench --json`), cold and cached, and runs the GPU tests.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=/tmp/kacache MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
agent check problems/selective_scan.yaml | tee "$OUT/check.txt"
SOL=problems/selective_scan/solutions
VARIANTS=${VARIANTS:-"01_naive_fused 05_tuned 06_3xtf32 alt/05_fast_arith"}
# Build every variant at once (each compile is its own process), then benchmark one at a time.
for v in $VARIANTS; do
  python3 -c "import sys; from tools.problem import load_problem; from tools import compile_kernel
r = compile_kernel(load_problem('problems/selective_scan.yaml'), open('$SOL/$v.py').read())
print('$v', r.status, round(r.seconds, 1), 'cached' if r.cached else 'cold', r.message[:300])" &
done
wait
for v in $VARIANTS; do
  name=$(basename "$v")
  agent bench problems/selective_scan.yaml "$SOL/$v.py" --json > "$OUT/bench_${name}.json"
  python3 - "$OUT/bench_${name}.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["timings"]}
row = [f"{k}: {v['candidate']['median_ms']:.3f}ms rse {v['candidate']['rse']:.2%} ref {v['reference']['median_ms']:.1f}ms"
       for k, v in t.items() if v.get("candidate") and v.get("reference")]
print(sys.argv[1].split("bench_")[-1], d["status"], d["correct"], d["speedup"], d["flags"], "compile", d["compile"]["seconds"] if d["compile"] else None)
print("   ", "; ".join(row) or d["message"][:400])
PY
done
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_evaluator.py 2>&1 | tail -15
