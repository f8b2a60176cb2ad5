#!/usr/bin/env bash
# The GPU gate: one command on a bare H200, from the repo root (.whl carried: see bench/h200_lib.sh's h200_setup). A change
# to evaluation, workers, builds, timing or the loop is done only when this passes on the H200 after it.
#
#   bash bench/h200_gate.sh            (GATE_COMMIT=<sha> names the code in the log where .git is absent)
#
# Checks the default path end to end (warm workers, default settings), each step's seconds printed:
#   1. install, then the kernels the gate uses built in parallel (bench.prebuild);
#   2. the `gate`-marked GPU tests, all on the small problem (tests/adversarial/gpu/scan_gpu_small.yaml): an
#      honest kernel correct and timed; one exploit each of timing (a patched event timer), output (unwritten
#      output) and precision (TF32) caught; a never-returning kernel → `timeout` and an illegal address →
#      `runtime_error`, each followed by a candidate that is ok;
#   3. `agent bench` of the shipped best (status ok, no flag, no L2 set aside counted against it);
#   4. a 2-turn scripted `agent run` (exit 4, `--max-turns` reached, is its success; `--no-sanitize`, below)
#      whose best.json holds a final re-checked best faster than the reference.
# Budget: 300 s of command time, install included, judged on the total: each step's own timeout only guards
# against a hang (together they fit one 600 s device call), so a slow step fails the gate by the total with
# every later step's log, never by a cut that hides whether its checks passed. Ends with one line:
#   PASSED: N passed, 0 failed      or      FAILED: N passed, M failed
# Logs in $OUT (default /tmp/gate): gate.txt, gpu_tests.txt, gpu_durations.txt, gpu_failures.txt,
# bench_best.json, run.txt, run.tar.gz (the run's folder), figures.jsonl. The whole GPU tier: bench/h200_tier.sh.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/gate}; mkdir -p "$OUT"
RUNS=${GATE_RUNS:-/tmp/gate_runs}  # the scripted run's folder, packed into $OUT/run.tar.gz at the end
LIMIT=${GATE_LIMIT:-300}  # the budget; GATE_LIMIT only to learn how far over it runs
exec > >(tee "$OUT/gate.txt") 2>&1
. bench/h200_lib.sh && h200_setup
machine_facts
step_done install

passed=0; failed=0
check() {  # check NAME STATUS: one gate check passed (0) or failed (anything else)
  if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1 (exit $2)"; fi
}

timeout 150 python3 -m bench.prebuild problems/selective_scan.yaml $SOL/01_naive_fused.py \
  $SOL/04_chunked_scan.py $SOL/best.py --gate-candidates --jobs 8
check "prebuild" $?
step_done prebuild

# The main problem's reference is timed cold by `agent bench` (bounded: reference_max_seconds), then reused.
# Only the folder that holds the gate's tests is collected (tests/test_gate_selection.py checks they all live
# there): collecting all of tests/ cost 4 s of the budget.
timeout 200 python3 -m pytest -m "gpu and gate" -p no:cacheprovider -v -rfE --durations=0 \
  tests/adversarial/gpu > "$OUT/gpu_tests.txt" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/gpu_tests.txt" | tail -12
read -r tp tf < <(pytest_counts "$OUT/gpu_tests.txt")
passed=$((passed + tp)); failed=$((failed + tf))
if [ "$rc" -ne 0 ] && [ "$tf" -eq 0 ]; then failed=$((failed + 1)); echo "FAIL gate tests did not finish (exit $rc)"; fi
[ "$tp" -ge 7 ] || { failed=$((failed + 1)); echo "FAIL only $tp gate tests passed (7 expected)"; }
[ -s "$OUT/gpu_failures.txt" ] && grep -E "^(===|E  )" "$OUT/gpu_failures.txt" | cut -c1-300 | head -40
step_done "gate tests"

timeout 75 agent bench problems/selective_scan.yaml $SOL/best.py --json > "$OUT/bench_best.json"
rc=$?
python3 - "$OUT/bench_best.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
phases = ", ".join(f"{k} {v:.1f}" for k, v in r.get("phases", {}).items() if v >= 0.5)
print(f"agent bench best: {r['status']} {r['flags']} {r['seconds']:.1f} s ({phases}) {r['message'][:160]}")
for t in r.get("timings", []):  # each shape's figure beside its events, the host's issue time and the hold
    c = t.get("candidate") or {}
    if c:
        print(f"  {t['name']}: {c['median_ms']:.4f} ms (events {c.get('event_median_ms') or 0:.4f}, issue "
              f"{c.get('launch_median_ms') or 0:.3f}, quickest {c.get('launch_min_ms') or 0:.3f}, hold "
              f"{c.get('hold_median_ms') or 0:.3f}, host-bound calls {c.get('host_bound_calls')})")
# An honest kernel sets no L2 aside: a figure here is the host's own persisting default miscounted (84108b2).
aside = [t["name"] for t in r.get("timings", []) if (t.get("candidate") or {}).get("l2_set_aside_bytes")]
if aside:
    print(f"FAIL: the honest best was told it set L2 aside for persisting accesses at {aside}")
sys.exit(0 if r["status"] == "ok" and not r["flags"] and not aside else 1)
PY
check "agent bench best.py (exit $rc)" $(( rc != 0 ? rc : $? ))
step_done "agent bench"

# --no-sanitize: compute-sanitizer on each new best (on by default for CUDA problems) adds ~28 s per kernel,
# which the 300 s budget cannot hold; tests/adversarial/gpu/test_gpu_sanitize.py covers it (PART=1).
timeout 150 agent run problems/selective_scan.yaml --model scripted --max-turns 2 \
  --no-sanitize --runs-dir "$RUNS" > "$OUT/run.txt" 2>&1
rc=$?
tail -4 "$OUT/run.txt"
run=$(ls -d "$RUNS"/*selective_scan-* 2>/dev/null | tail -1)
tar -czf "$OUT/run.tar.gz" -C "$RUNS" "$(basename "$run")" 2>/dev/null
python3 - "$run" <<'PY'
import json, sys
from pathlib import Path
best = json.loads((Path(sys.argv[1]) / "best.json").read_text())
assert best.get("final") and best.get("speedup", 0) > 1, best
print(f"scripted run: best {best['speedup']:.1f}x at {best['median_ms']:.3f} ms (final re-check)")
PY
best_rc=$?
# Exit 4 is the documented status of "--max-turns reached": what a 2-turn run must end with.
check "scripted 2-turn run (exit $rc)" $(( rc != 4 ? (rc == 0 ? 99 : rc) : best_rc ))
step_done "scripted run"

echo "gate took $(elapsed) s (limit ${LIMIT} s) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
if [ "$failed" -eq 0 ] && [ "$(elapsed)" -le "$LIMIT" ]; then
  echo "PASSED: $passed passed, $failed failed"
else
  [ "$(elapsed)" -gt "$LIMIT" ] && echo "over the ${LIMIT} s budget"
  echo "FAILED: $passed passed, $failed failed"
  exit 1
fi
