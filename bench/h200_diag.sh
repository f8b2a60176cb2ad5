#!/usr/bin/env bash
# On the H200 (device tool), with .whl carried: where a CUDA evaluation's seconds go and how the timing
# clocks behave on a quiet and on a loaded host. Writes under $OUT: cuda_startup.json, bench_best.json,
# eval_phases_warm.json, honest_sweep.json.
set -uo pipefail
START=$(date +%s)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=/tmp/kacache MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; nproc
python3 bench/cuda_startup.py --json "$OUT/cuda_startup.json" 2>&1 | tail -30
echo "== agent bench best (default settings) after $(( $(date +%s) - START )) s"
/usr/bin/time -f "agent bench wall %e s" agent bench problems/selective_scan.yaml problems/selective_scan/solutions/best.py --json > "$OUT/bench_best.json"
python3 -c "import json,sys; r=json.load(open('$OUT/bench_best.json')); print(r['status'], r['workers'], round(r['seconds'],1), r['message'][:300]); print(r['phases']); print(r['notices'])"
echo "== eval phases after $(( $(date +%s) - START )) s"
timeout 150 python3 -m bench.eval_phases problems/selective_scan.yaml problems/selective_scan/solutions/best.py --repeat 4 --think 6 --json "$OUT/eval_phases_warm.json" 2>&1 | grep -v "^  " | tail -12
python3 - "$OUT/eval_phases_warm.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
for row in runs[-1]["timeline"]:
    print(f"  {row['t']:8.3f} {row['who']:9s} {row['event']} {row.get('name') or ''}")
PY
echo "== honest sweep after $(( $(date +%s) - START )) s"
python3 -c "from tests.adversarial.gpu import gpu_candidates as g; open('/tmp/unjoined.py','w').write(g.unjoined_side_stream())"
timeout 240 python3 bench/honest_sweep.py problems/selective_scan.yaml problems/selective_scan/solutions/01_naive_fused.py problems/selective_scan/solutions/best.py /tmp/unjoined.py --rounds 4 --json "$OUT/honest_sweep.json" 2>&1 | grep -v Warning | tail -20
echo "total $(( $(date +%s) - START )) s"
