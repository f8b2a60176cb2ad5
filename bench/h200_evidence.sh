#!/usr/bin/env bash
# Issue 12's evidence on the H200 (device tool, .whl carried), after the gate has passed, in three calls
# (an evaluation of the main problem takes 10-20 s there, so 30 do not fit one 10-minute call):
#   PART=sweep_a bash bench/h200_evidence.sh # 01, 05, 06: 6 rounds each (18 verdicts), every other round
#   PART=sweep_b bash bench/h200_evidence.sh # 07, best: 6 rounds each (12)   with one busy process per core
#   PART=tools bash bench/h200_evidence.sh   # tool seconds: 10 compiles unchanged, 10 kernel-only edits,
#                                            # 10 benchmarks of best.py each 12 s after the last (the model's turn)
# Writes $OUT/honest_sweep_{a,b}.json or $OUT/tool_seconds_h200.json, and the console log beside it.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^$" | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache-gate} MAX_JOBS=$(nproc)
SOL=problems/selective_scan/solutions
sweep() {  # sweep NAME KERNEL...
  local name=$1; shift
  timeout 570 python3 bench/honest_sweep.py problems/selective_scan.yaml "$@" --rounds 6 \
    --json "$OUT/honest_sweep_$name.json" 2>&1 | tee "$OUT/honest_sweep_$name.txt"
}
case "${PART:-sweep_a}" in
  sweep_a) sweep a $SOL/01_naive_fused.py $SOL/05_tuned.py $SOL/06_3xtf32.py ;;
  sweep_b) sweep b $SOL/07_fast_scan_3xtf32.py $SOL/best.py ;;
  tools)
    timeout 570 python3 -m bench.tool_seconds problems/selective_scan.yaml $SOL/best.py --runs 10 --think 12 \
      --cold 0 --json "$OUT/tool_seconds_h200.json" 2>&1 | grep -v Warning | tee "$OUT/tool_seconds.txt" ;;
esac
