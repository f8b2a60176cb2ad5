#!/usr/bin/env bash
# Thirty honest evaluations in one device call (.whl carried), from the repo root: bench/honest_sweep.py on the
# shipped best and two other bundled solutions, ten rounds, every other one beside a busy process per core.
# Compiles the three first (~85 s on a bare H200), then ~6 s an evaluation. Writes $OUT/honest_sweep.{txt,json}.
# First, on the quiet host, bench/reference_windows.py (~80 s; REFWIN=0 leaves it out): why the eager
# reference's time moves between windows (the paired check read 51-105 ms on one quiet host), in
# $OUT/reference_windows.{txt,json}.
#   ROUNDS=10 bash bench/h200_sweep.sh
# Issue 50's stability sweep, one honest kernel 30 times (15 beside load), its headline's max/min beside the eager
# speedup's in the last lines:
#   KERNELS=best.py ROUNDS=30 REFWIN=0 SWEEP_S=540 bash bench/h200_sweep.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_lib.sh && h200_setup
if [ "${REFWIN:-1}" = 1 ]; then
  timeout 150 python3 bench/reference_windows.py problems/selective_scan.yaml --windows 6 \
    --json "$OUT/reference_windows.json" 2>&1 | grep -v Warning > "$OUT/reference_windows.txt"
  tail -6 "$OUT/reference_windows.txt"
fi
KERNELS=${KERNELS:-"best.py 04_chunked_scan.py 01_naive_fused.py"}
timeout ${SWEEP_S:-400} python3 bench/honest_sweep.py problems/selective_scan.yaml $(for k in $KERNELS; do echo "$SOL/$k"; done) \
  --rounds ${ROUNDS:-10} --load-every 2 --json "$OUT/honest_sweep.json" 2>&1 \
  | grep -v Warning > "$OUT/honest_sweep.txt"
tail -8 "$OUT/honest_sweep.txt"  # the summary, then each kernel's headline max/min beside the eager speedup's
echo "took $(( $(date +%s) - START )) s"
