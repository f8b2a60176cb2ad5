#!/usr/bin/env bash
# The whole GPU test tier on the H200, in two runs (each ≤ 540 s, install and builds included), together
# every `gpu`-marked test once. Run it when a change touches timing, workers or guards; the gate
# (bench/h200_gate.sh) is the short check of the default path.
#
#   PART=1 bash bench/h200_tier.sh     # tests/adversarial/gpu: exploits and faults
#   PART=2 bash bench/h200_tier.sh     # every other gpu-marked test (evaluator, replay of the best, ...)
#
# Ends with `PART N: P passed, F failed` (F counts errors and a suite cut by its limit). Logs in $OUT
# (default /tmp/gpu_tests): gpu_tests_N.txt (pytest -v with --durations=0), gpu_durations.txt (each test's
# seconds as it ends), gpu_failures.txt (each failure's report as it happens), figures.jsonl.
set -uo pipefail
START=$(date +%s)
PART=${PART:?PART=1 or PART=2}
OUT=${OUT:-/tmp/gpu_tests}; mkdir -p "$OUT"
LIMIT=${TIER_LIMIT:-540}
exec > >(tee "$OUT/tier_$PART.txt") 2>&1
. bench/h200_lib.sh && h200_setup
machine_facts
step_done install

case "$PART" in
  1) select=(tests/adversarial/gpu); extra=(--gpu-candidates) ;;
  2) select=(tests --ignore=tests/adversarial/gpu); extra=() ;;
  *) echo "PART must be 1 or 2"; exit 2 ;;
esac
timeout $(( LIMIT - $(elapsed) )) python3 -m bench.prebuild problems/selective_scan.yaml $SOL/01_naive_fused.py \
  $SOL/04_chunked_scan.py $SOL/best.py "${extra[@]}" --jobs 8
build_rc=$?
step_done prebuild

timeout $(( LIMIT - 3 - $(elapsed) )) python3 -m pytest -m gpu -p no:cacheprovider -v -rfE --durations=0 \
  "${select[@]}" > "$OUT/gpu_tests_$PART.txt" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/gpu_tests_$PART.txt" | tail -30
read -r tp tf < <(pytest_counts "$OUT/gpu_tests_$PART.txt")
if [ "$rc" -ne 0 ] && [ "$tf" -eq 0 ]; then tf=1; echo "the tests did not finish (exit $rc)"; fi
[ "$build_rc" -eq 0 ] || { tf=$((tf + 1)); echo "a prebuild failed (exit $build_rc)"; }
[ -s "$OUT/gpu_failures.txt" ] && grep -E "^(===|E  )" "$OUT/gpu_failures.txt" | cut -c1-300 | head -40
step_done tests
echo "part $PART took $(elapsed) s (limit $LIMIT s)"
echo "PART $PART: $tp passed, $tf failed"
[ "$tf" -eq 0 ]
