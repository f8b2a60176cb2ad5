#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried:
#   GATE_COMMIT=<sha> bash bench/h200_suite.sh
# The CUDA half of problems/kb_mini: its six CUDA solutions built in parallel (they land in the shared
# build cache), judged with `agent suite --kernels`, then the same suite played back by the scripted
# model (one run per problem, each benchmarking that solution), then the suite's GPU test. Each suite's
# --json object and its folder come back in $OUT (suite_kernels.json, suite_scripted.json, *.tar.gz).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_lib.sh && h200_setup
export COLUMNS=160
machine_facts
python3 - <<'PY'
import concurrent.futures as cf
from pathlib import Path
from tools import compile_kernel
from tools.problem import load_problem
specs = sorted(Path("problems/kb_mini/cuda").glob("*.yaml"))
def build(spec):
    problem = load_problem(spec)
    return problem.name, compile_kernel(problem, Path(f"problems/kb_mini/solutions/cuda/{problem.name}.py").read_text())
with cf.ThreadPoolExecutor(6) as pool:
    for name, r in pool.map(build, specs):
        print(f"prebuilt {name}: {r.status} {r.seconds:.1f}s")
PY
for mode in kernels scripted; do
  start=$(date +%s)
  if [ "$mode" = kernels ]; then args=(--kernels problems/kb_mini/solutions/cuda); else args=(--model scripted); fi
  timeout ${SUITE_TIMEOUT:-240} agent suite problems/kb_mini/cuda "${args[@]}" --runs-dir "runs/$mode" --json \
    > "$OUT/suite_$mode.json" 2> "$OUT/suite_$mode.txt"
  echo "suite $mode: exit $? in $(( $(date +%s) - start )) s"; tail -14 "$OUT/suite_$mode.txt"
  suite=$(ls -d runs/$mode/*-suite-* | sort | tail -1) && tar czf "$OUT/suite_$mode.tar.gz" "$suite"
done
python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_suite.py 2>&1 | tail -8 | tee "$OUT/pytest_gpu.txt"
