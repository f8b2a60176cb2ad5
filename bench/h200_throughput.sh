#!/usr/bin/env bash
# Candidates an hour on problems/selective_scan.yaml, on a bare GPU machine (1 GPU, or more), from the repo root
# (.whl carried):
#   GATE_COMMIT=<sha> bash bench/h200_throughput.sh                        # cached, fresh, run (~9 minutes)
#   GATE_COMMIT=<sha> STEPS="timeline" bash bench/h200_throughput.sh       # who held the device (~4 minutes)
#   GATE_COMMIT=<sha> STEPS="scale" bash bench/h200_throughput.sh          # N=1,2,4, truth made / shared (~9 min)
# STEPS (any of, in this order):
#   cached    bench/throughput.py, builds made first: 1 and 2 trajectories on one GPU, each trajectory's first
#             3 evaluations not counted (its truth server's start: a run going on); on 2+ GPUs also 2 and 4
#             trajectories over all of them (close to twice one GPU's rate is the aim)
#   fresh     every candidate a new build (as with a model): 1 trajectory against 4 (one GPU only)
#   run       a real `agent run --parallel 2` whose lease events must never overlap
#   timeline  bench/timeline.py: 1 and 2 trajectories, who held the device (exclusive, shared, idle), the truth
#             servers, a strip chart; then bench/eval_phases.py (a fresh process's first evaluations)
#   scale     bench/timeline.py, cached builds, each trajectory's first 3 evaluations not counted: N=1, 2 and 4 on
#             one GPU with a truth made for every evaluation (SHARE=off), then with input sets shared between
#             candidates' evaluations in flight (SHARE=on, KERNEL_AGENT_SHARE_TRUTH); per configuration:
#             candidates an hour and against N=1, the truth servers' busy share, overlapping timing leases (must
#             be 0), verdicts other than ok (must be 0: every scripted candidate is correct), where each truth
#             came from, the host time to the first launch. SCALE_N (default 1,2,4), SCALE_CANDIDATES (16),
#             SHARE ("off on"), SCALE_S (seconds a mode, 290), SCALE_EVALS (evaluations a GPU takes at once,
#             each N>1 at each, e.g. "2,4"; default the leases' own).
# Each step has its own time limit; every finished row is already in $OUT when a later step runs out of time.
# Writes to $OUT: throughput.md (the tables), throughput.jsonl (one object per configuration, with date and
# hardware), parallel_run.txt and parallel_run.tar.gz, timeline.{txt,json}, eval_phases.{txt,json},
# scale_{off,on}.{txt,json} and throughput_summary.json (scale: one object per configuration, both modes).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_lib.sh && h200_setup
STEPS=${STEPS:-cached fresh run}
NGPU=$(nvidia-smi -L | grep -c '^GPU ')
ALL=$(seq -s, 0 $((NGPU - 1)))
T="python3 bench/throughput.py problems/selective_scan.yaml --json $OUT/throughput.jsonl --minutes ${MINUTES:-0.6}"
{ machine_facts; nvidia-smi -L; } | tee "$OUT/throughput.md"
has() { [[ " $STEPS " == *" $1 "* ]]; }

if has cached; then
  timeout 300 $T --cached --candidates 24 --parallel 1,2 --gpus 0 --warm-up 3 --minutes 2 2>&1 | tee -a "$OUT/throughput.md"
  if [ "$NGPU" -gt 1 ]; then
    timeout 130 $T --cached --candidates 12 --parallel 2,4 --gpus "$ALL" --warm-up 3 2>&1 | tee -a "$OUT/throughput.md"
  fi
  step_done cached
fi
if has fresh && [ "$NGPU" -eq 1 ]; then
  timeout 170 $T --candidates 8 --parallel 1,4 --gpus "$ALL" 2>&1 | tee -a "$OUT/throughput.md"
  step_done fresh
fi
if has run; then
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
  step_done run
fi
if has timeline; then
  machine_facts > "$OUT/timeline.txt"
  timeout ${TIMELINE_S:-300} python3 bench/timeline.py problems/selective_scan.yaml --parallel ${PARALLEL:-1,2} \
    --candidates ${CANDIDATES:-12} --cached --json "$OUT/timeline.json" 2>&1 | grep -v Warning | tee -a "$OUT/timeline.txt"
  timeout 120 python3 bench/eval_phases.py problems/selective_scan.yaml $SOL/best.py --repeat 3 \
    --json "$OUT/eval_phases.json" 2>&1 | grep -v Warning > "$OUT/eval_phases.txt"
  head -60 "$OUT/eval_phases.txt"
  step_done timeline
fi
if has scale; then
  machine_facts > "$OUT/scale.txt"
  # the scripted kernels built and the reference timed first: each mode's time limit is then evaluations only
  timeout 240 python3 -c "from bench.throughput import cached_candidates; from tools.problem import load_problem; \
cached_candidates(load_problem('problems/selective_scan.yaml'), 1)" 2>&1 | grep -v Warning | tee -a "$OUT/scale.txt"
  step_done scale_builds
  for mode in ${SHARE:-off on}; do
    timeout ${SCALE_S:-290} python3 bench/timeline.py problems/selective_scan.yaml --parallel ${SCALE_N:-1,2,4} \
      --candidates ${SCALE_CANDIDATES:-16} --cached --share-truth $mode ${SCALE_EVALS:+--evals-per-gpu $SCALE_EVALS} --json "$OUT/scale_$mode.json" \
      --summary "$OUT/scale_summary_$mode.json" 2>&1 | grep -v Warning | tee "$OUT/scale_$mode.txt" | grep -E "^N=|overlapping"
  done
  python3 - "$OUT" <<'PY' | tee -a "$OUT/scale.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = [r for mode in ("off", "on") if (out / f"scale_summary_{mode}.json").is_file()
        for r in json.loads((out / f"scale_summary_{mode}.json").read_text())]
(out / "throughput_summary.json").write_text(json.dumps(rows, indent=1))
for r in rows:
    print(f"shared truth {r['share_truth']:>3} N={r['parallel']} ({r.get('evals_per_gpu')} a GPU): {r['per_hour']}/h (x{r['x_one']} of N=1), "
          f"truth servers busy {r['truth_busy_pct']}%, device idle {r['device_idle_pct']}%, "
          f"timing leases overlapping {r['timing_lease_overlaps']}, not ok {r['not_ok']} of {r['candidates']}, "
          f"truth {r['truth_sources']}, first launch {r['first_launch_ms_median']} ms, "
          f"device memory peak {r['device_memory_peak_mib']} MiB")
PY
  step_done scale
fi
echo "took $(elapsed) s"
