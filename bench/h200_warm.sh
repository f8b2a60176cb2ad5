#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried:
#   bash bench/h200_warm.sh
# Installs the project as h200_evaluator.sh does, compiles one shipped selective-scan solution, then
# measures tool seconds per evaluation of that compiled candidate cold (KERNEL_AGENT_WARM=0: fresh
# truth and candidate processes, main's path) and warm (tools/supervise/pool.py), with the per-phase breakdown,
# and runs the GPU tests that touch warm workers (warm is the default, so they go through it).
# Writes under $OUT: gpu.txt, warm_h200.json (every result with phases), warm_h200.txt (the table),
# compile.txt, pytest_*.txt. Stays under 8 minutes: the tests get what is left of a 450 s budget.
# Without a GPU it still runs the CPU problem (PROBLEM/KERNEL below) and skips the GPU tests.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
fi
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache} MAX_JOBS=${MAX_JOBS:-16}
if nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/gpu.txt" 2>&1; then
  PROBLEM=${PROBLEM:-problems/selective_scan.yaml}
  KERNEL=${KERNEL:-problems/selective_scan/solutions/05_tuned.py}
  GPU=1
else
  PROBLEM=${PROBLEM:-tests/problems/scan_tiny.yaml}
  KERNEL=${KERNEL:-problems/selective_scan_cpu/solutions/baseline.py}
  GPU=0
fi
cat "$OUT/gpu.txt"
df -h /dev/shm | tail -1 | tee -a "$OUT/gpu.txt"
python3 - "$PROBLEM" "$KERNEL" <<'PY' 2>&1 | tee "$OUT/compile.txt"
import sys
from tools import compile_kernel
from tools.problem import load_problem
r = compile_kernel(load_problem(sys.argv[1]), open(sys.argv[2]).read())
print(sys.argv[2], r.status, round(r.seconds, 1), "cached" if r.cached else "cold", r.message[:300])
PY
python3 bench/warm_vs_cold.py --problem "$PROBLEM" --kernel "$KERNEL" --cold "${COLD:-2}" --warm "${WARM:-4}" \
  --think "${THINK:-15}" --out "$OUT/warm_h200.json" 2>&1 | tee "$OUT/warm_h200.txt"
left() { echo $(( 450 - ($(date +%s) - START) )); }
echo "bench done after $(( $(date +%s) - START )) s"
if [ "$GPU" = 1 ]; then
  for t in tests/test_gpu_evaluator.py tests/adversarial/gpu/test_gpu_exploits.py; do
    budget=$(left); [ "$budget" -lt 30 ] && { echo "no time left for $t" | tee -a "$OUT/pytest_skipped.txt"; continue; }
    name=$(basename "$t" .py)
    timeout "$budget" python3 -m pytest -m gpu -q -p no:cacheprovider "$t" > "$OUT/pytest_${name}.txt" 2>&1
    echo "$t: exit $? ($(tail -1 "$OUT/pytest_${name}.txt"))"
  done
fi
budget=$(left)
if [ "$budget" -ge 60 ]; then
  timeout "$budget" python3 -m pytest -q -p no:cacheprovider tests/test_warm.py > "$OUT/pytest_test_warm.txt" 2>&1
  echo "tests/test_warm.py: exit $? ($(tail -1 "$OUT/pytest_test_warm.txt"))"
fi
echo "total $(( $(date +%s) - START )) s"
