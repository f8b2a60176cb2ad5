#!/usr/bin/env bash
# The shipped selective-scan kernels through the real evaluator on a bare GPU machine, from the repo root
# (.whl carried): the kernel table's figures.
#   GATE_COMMIT=<sha> bash bench/h200_kernels.sh                              # every variant (~6 min)
#   GATE_COMMIT=<sha> KERNELS="best" bash bench/h200_kernels.sh               # the shipped best alone
#   GATE_COMMIT=<sha> KERNELS="" SCRIPTED=1 bash bench/h200_kernels.sh        # the bundled trajectory played back
# Builds every kernel at once (each compile its own process), then `agent bench --json` of each of KERNELS
# one at a time (a row each: status, per-shape median, RSE, the reference). SCRIPTED=1 plays the bundled
# trajectory back with the tools running for real (`agent run --model scripted`; its folder is the run the
# report's screenshots show). Writes under $OUT: kernels.txt, bench_<kernel>.json, run.tar.gz, best.json, show.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
exec > >(tee "$OUT/kernels.txt") 2>&1
. bench/h200_lib.sh && h200_setup
KERNELS=${KERNELS-"01_naive_fused 05_tuned 06_3xtf32 07_fast_scan_3xtf32 08_lanes4_3xtf32 best alt/11_graph_gemm alt/12_lanes8"}
machine_facts
step_done install
agent check problems/selective_scan.yaml | tail -3
files=$(for k in $KERNELS; do echo "$SOL/$k.py"; done)
if [ "${SCRIPTED:-0}" = 1 ]; then
  files="$files $(python3 -c "import yaml; from pathlib import Path
t = Path('problems/selective_scan/trajectory.yaml')
print(' '.join(str(t.parent / c['kernel_file']) for s in yaml.safe_load(t.read_text())['steps'] for c in s.get('tool_calls', [])))")"
fi
[ -n "${files// }" ] && timeout 300 python3 -m bench.prebuild problems/selective_scan.yaml $files --jobs 8
step_done prebuild
for k in $KERNELS; do
  name=${k//\//_}
  timeout 120 agent bench problems/selective_scan.yaml "$SOL/$k.py" --json > "$OUT/bench_$name.json"
  python3 - "$OUT/bench_$name.json" "$k" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = [f"{t['name']}: {t['candidate']['median_ms']:.3f} ms rse {t['candidate']['rse']:.2%} ref {t['reference']['median_ms']:.1f} ms"
        for t in d["timings"] if t.get("candidate") and t.get("reference")]
print(sys.argv[2], d["status"], d["speedup"], d["flags"])
print("   ", "; ".join(rows) or d["message"][:400])
PY
done
step_done bench
if [ "${SCRIPTED:-0}" = 1 ]; then
  timeout ${RUN_TIMEOUT:-420} agent run problems/selective_scan.yaml --model scripted --runs-dir runs 2>&1 | tail -20
  run=$(ls -d runs/*selective_scan-* | sort | tail -1)
  tar czf "$OUT/run.tar.gz" "$run"
  cp "$run/best.json" "$OUT/best.json" 2>/dev/null
  agent show "$run" --no-code > "$OUT/show.txt" 2>&1
  step_done "scripted run"
fi
echo "took $(elapsed) s"
