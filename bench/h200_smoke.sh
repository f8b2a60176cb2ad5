#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried: install, build every shipped CUDA
# solution and GPU test candidate at once (16 cores), benchmark the best kernel, run the evaluator's GPU
# tests. A short call that proves the harness works there before the long ones.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache} MAX_JOBS=16
python3 - <<'PY'
import concurrent.futures as cf
from pathlib import Path
from tools import compile_kernel
from tools.problem import load_problem
problem = load_problem("problems/selective_scan.yaml")
files = sorted(Path("problems/selective_scan/solutions").glob("*.py"))
with cf.ThreadPoolExecutor(12) as pool:
    for f, r in zip(files, pool.map(lambda f: compile_kernel(problem, f.read_text()), files)):
        print(f"built {f.name}: {r.status} {r.seconds:.1f}s {'cached' if r.cached else 'cold'} {r.message[:200]}")
PY
agent bench problems/selective_scan.yaml problems/selective_scan/solutions/best.py --json > "$OUT/bench_best.json"
python3 -c "
import json; d = json.load(open('$OUT/bench_best.json'))
print('best.py', d['status'], d['correct'], d['speedup'], d['flags'], d['message'][:600])"
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_evaluator.py 2>&1 | tail -8
