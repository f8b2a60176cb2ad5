#!/usr/bin/env bash
# On the H200 (device tool; 1 GPU, or a 2-GPU machine), from the repo root, with .whl carried:
#   KERNEL_AGENT_HARNESS_SHA=<sha> bash bench/h200_throughput.sh
# Candidates per hour on problems/selective_scan.yaml (bench/throughput.py), then a real
# `agent run --parallel 2` whose lease events are checked for overlaps. About 9 minutes; each step has
# its own time limit, and every finished row is already in $OUT when a later step runs out of time.
# Writes to $OUT: throughput.md (the tables), throughput.jsonl (one object per configuration, with date
# and hardware), parallel_run.txt (the run's show output and the lease check), parallel_run.tar.gz.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=/tmp/kacache
unset ANTHROPIC_API_KEY
MINUTES=${MINUTES:-0.6}
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
ALL=$(seq -s, 0 $((NGPU - 1)))
T="python3 bench/throughput.py problems/selective_scan.yaml --json $OUT/throughput.jsonl --minutes $MINUTES"
nvidia-smi -L | tee "$OUT/throughput.md"

# 1. Evaluation throughput (the scripted kernels built first, not timed): 1 and 2 trajectories on one GPU,
#    each after 3 evaluations a trajectory not counted (its truth server's start): a run going on.
timeout 300 $T --cached --candidates 24 --parallel 1,2 --gpus 0 --warm-up 3 --minutes 2 2>&1 | tee -a "$OUT/throughput.md"
if [ "$NGPU" -gt 1 ]; then
  # 2a. The same on every GPU: on two GPUs this should come close to twice one GPU's rate.
  timeout 130 $T --cached --candidates 12 --parallel 2,4 --gpus "$ALL" 2>&1 | tee -a "$OUT/throughput.md"
else
  # 2b. Compile + evaluate, every candidate a fresh build (as with a model): 1 trajectory vs 4.
  timeout 170 $T --candidates 8 --parallel 1,4 --gpus "$ALL" 2>&1 | tee -a "$OUT/throughput.md"
fi

# 3. A real parallel run (scripted, builds cached by step 1): leases from its log must never overlap.
timeout 90 agent run problems/selective_scan.yaml --model scripted --parallel 2 --branches 0 --max-turns 1 \
  --runs-dir runs 2>&1 | tail -30 > "$OUT/parallel_run.txt"
run=$(ls -d runs/*selective_scan-* 2>/dev/null | sort | tail -1)
if [ -n "$run" ]; then
  tar czf "$OUT/parallel_run.tar.gz" "$run"
  python3 - "$run" >> "$OUT/parallel_run.txt" 2>&1 <<'PY'
import sys
from agent.runlog.data import overlapping_leases
from agent.runlog.reader import load_run
run = load_run(sys.argv[1])
spans = run.leases
timings = [s for s in spans if s.kind == "timing"]
print(f"leases: {len(spans)} ({len(timings)} timings on {sorted({s.resource for s in timings})})")
print(f"overlapping timing leases on one GPU: {overlapping_leases(spans, cpu_problem=False)}")
print(f"best: {run.best_speedup} ({run.best_kernel_path}); trajectories: {[(t.number, t.exit_status) for t in run.trajectories]}")
PY
  agent show "$run" --no-code 2>&1 | tail -12 >> "$OUT/parallel_run.txt"
fi
cat "$OUT/parallel_run.txt"
