#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried:
#   KERNEL_AGENT_HARNESS_SHA=<sha> bash bench/h200_scripted_run.sh
# Builds the bundled trajectory's kernels in parallel (they land in the shared build cache), plays the
# trajectory back with the tools running for real, then runs every GPU test (the replay test picks
# this run's best.py). The run folder comes back as $OUT/run.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=/tmp/kacache MAX_JOBS=16
unset ANTHROPIC_API_KEY
python3 - <<'PY'
import concurrent.futures as cf, yaml
from pathlib import Path
from tools.problem import load_problem
from tools import compile_kernel
problem = load_problem("problems/selective_scan.yaml")
traj = Path("problems/selective_scan/trajectory.yaml")
files = [traj.parent / c["kernel_file"] for s in yaml.safe_load(traj.read_text())["steps"] for c in s.get("tool_calls", [])]
with cf.ThreadPoolExecutor(8) as pool:
    for f, r in zip(files, pool.map(lambda f: compile_kernel(problem, f.read_text()), files)):
        print(f"prebuilt {f.name}: {r.status} {r.seconds:.1f}s")
PY
timeout ${RUN_TIMEOUT:-420} agent run problems/selective_scan.yaml --model scripted --runs-dir runs 2>&1 | tail -60
run=$(ls -d runs/*selective_scan-* | sort | tail -1)
tar czf "$OUT/run.tar.gz" "$run"
cat "$run/best.json" > "$OUT/best.json" 2>/dev/null
agent show "$run" --no-code > "$OUT/show.txt" 2>&1
python3 -m pytest -m gpu -q -p no:cacheprovider ${GPU_TESTS:-tests} 2>&1 | tail -25 | tee "$OUT/pytest_gpu.txt"
