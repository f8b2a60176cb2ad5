#!/usr/bin/env bash
# Who waits for what on one H200 (issue 27), in one device call (.whl carried), from the repo root:
#   GATE_COMMIT=<sha> bash bench/h200_timeline.sh
# 1. bench/timeline.py: 1 and 2 trajectories of cached builds, the device's and truth servers' use;
# 2. bench/eval_phases.py: a fresh process's first evaluations of best.py, each worker message's arrival.
# Writes $OUT/timeline.{txt,json}, $OUT/eval_phases.{txt,json}. ~4 minutes (TIMELINE_S bounds the timeline, 300 s).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_setup.sh
echo "code: ${GATE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" | tee "$OUT/timeline.txt"
timeout ${TIMELINE_S:-300} python3 bench/timeline.py problems/selective_scan.yaml --parallel ${PARALLEL:-1,2} \
  --candidates ${CANDIDATES:-12} --cached --json "$OUT/timeline.json" 2>&1 | grep -v Warning | tee -a "$OUT/timeline.txt"
step_done timeline
if [ "${PHASES:-1}" = 1 ]; then  # PHASES=0: the timeline alone
  timeout 120 python3 bench/eval_phases.py problems/selective_scan.yaml $SOL/best.py --repeat 3 \
    --json "$OUT/eval_phases.json" 2>&1 | grep -v Warning > "$OUT/eval_phases.txt"
  head -60 "$OUT/eval_phases.txt"
  step_done "eval phases"
fi
