#!/usr/bin/env bash
# The GPU gate: one command, on one H200, from the repo root (with .whl carried where the machine lacks
# pydantic/anthropic: ../shared/device/wheels.sh). A change to evaluation, workers, builds, timing or the
# loop is done only when this passes on the H200 after it.
#
#   bash bench/h200_gate.sh
#
# Installs the project, builds the kernels it uses (in parallel), then through the default path (warm
# workers, default settings): every `gpu`-marked test, a 2-turn scripted run of problems/selective_scan.yaml,
# and `agent bench` of the shipped best (its tests run with pytest's --durations=0: every test's seconds are in
# gpu_tests.txt). Prints its duration, then one last line:
#   PASSED: N passed, 0 failed      or      FAILED: N passed, M failed
# Budget: 8 minutes, install included. Logs go to $OUT (default /tmp/gate): gpu_tests.txt, run.txt,
# bench_best.json, gate.txt, gpu_failures.txt (each failing test's report), gpu_durations.txt, figures.jsonl.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/gate}; mkdir -p "$OUT"
LIMIT=${GATE_LIMIT:-480}  # the budget is 8 minutes; GATE_LIMIT only to learn how far over it runs
exec > >(tee "$OUT/gate.txt") 2>&1
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( LIMIT - $(elapsed) )); }

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^$" | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache-gate} MAX_JOBS=$(nproc)
export KERNEL_AGENT_FIGURES="$OUT/figures.jsonl"  # tests that measure a figure append it here
export KERNEL_AGENT_FAILURE_LOG="$OUT/gpu_failures.txt"  # each failing test's report, as it happens
export KERNEL_AGENT_DURATIONS_LOG="$OUT/gpu_durations.txt"  # each test's seconds, as it ends
unset ANTHROPIC_API_KEY KERNEL_AGENT_WARM
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
echo "installed after $(elapsed) s"

passed=0; failed=0
check() {  # check NAME STATUS: one gate check passed (0) or failed (anything else)
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1 (exit $2)"; fi
}

SOL=problems/selective_scan/solutions
timeout "$(left)" python3 -m bench.prebuild problems/selective_scan.yaml $SOL/01_naive_fused.py \
  $SOL/04_chunked_scan.py $SOL/best.py --gpu-candidates --jobs 8
check "prebuild" $?
echo "built after $(elapsed) s"

# The tests come first: they time the main problem's reference, which `agent bench` and the run then reuse
# (run first, `agent bench` spent 60 s timing it). Keep ~150 s for those two (H200, 2026-12-01: 35 s, and
# 85 s once the final re-check reuses the reference). Each test's seconds are in gpu_durations.txt as it ends.
timeout "$(( $(left) - 150 ))" python3 -m pytest -m gpu -p no:cacheprovider -v -rfE --durations=0 tests \
  > "$OUT/gpu_tests.txt" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/gpu_tests.txt" | tail -25
summary=$(grep -E "[0-9]+ (passed|failed)" "$OUT/gpu_tests.txt" | tail -1)
tp=$(echo "$summary" | grep -oE "[0-9]+ passed" | grep -oE "[0-9]+"); tf=$(echo "$summary" | grep -oE "[0-9]+ failed" | grep -oE "[0-9]+")
te=$(echo "$summary" | grep -oE "[0-9]+ errors?" | grep -oE "[0-9]+")
passed=$((passed + ${tp:-0})); failed=$((failed + ${tf:-0} + ${te:-0}))
if [ -z "$summary" ] || { [ "$rc" -ne 0 ] && [ "${tf:-0}" -eq 0 ] && [ "${te:-0}" -eq 0 ]; }; then
  failed=$((failed + 1)); echo "FAIL gpu tests did not finish (exit $rc)"
fi
echo "gpu tests after $(elapsed) s: ${summary:-no summary}"
[ -s "$OUT/gpu_failures.txt" ] && grep -E "^(===|E  )" "$OUT/gpu_failures.txt" | cut -c1-300 | head -60


timeout 100 agent bench problems/selective_scan.yaml $SOL/best.py --json > "$OUT/bench_best.json"
rc=$?
python3 -c "import json; r=json.load(open('$OUT/bench_best.json')); print('agent bench best:', r['status'], r['flags'], round(r['seconds'],1), 's', r['message'][:200])"
check "agent bench best.py" $rc
echo "bench after $(elapsed) s"

timeout "$(( $(left) - 3 ))" agent run problems/selective_scan.yaml --model scripted --max-turns 2 \
  --runs-dir "$OUT/runs" > "$OUT/run.txt" 2>&1
rc=$?
tail -4 "$OUT/run.txt"
run=$(ls -d "$OUT"/runs/*selective_scan-* 2>/dev/null | tail -1)
python3 - "$run" <<'PY'
import json, sys
from pathlib import Path
best = json.loads((Path(sys.argv[1]) / "best.json").read_text())
assert best.get("final") and best.get("speedup", 0) > 1, best
print(f"scripted run: best {best['speedup']:.1f}x at {best['median_ms']:.3f} ms (final re-check)")
PY
best_rc=$?
check "scripted 2-turn run (exit $rc)" $(( rc > 1 ? rc : best_rc ))

echo "gate took $(elapsed) s (limit ${LIMIT} s) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
if [ "$failed" -eq 0 ] && [ "$(elapsed)" -le "$LIMIT" ]; then
  echo "PASSED: $passed passed, $failed failed"
else
  [ "$(elapsed)" -gt "$LIMIT" ] && echo "over the ${LIMIT} s budget"
  echo "FAILED: $passed passed, $failed failed"
  exit 1
fi
