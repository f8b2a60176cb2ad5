#!/usr/bin/env bash
# One device call (.whl carried), from the repo root: the gate, the truth graphs' GPU tests, a fresh process's
# first evaluations of best.py (bench/eval_phases.py, warm caches) and bench/timeline.py with 1 and 2
# trajectories. Writes $OUT/all.tgz (gate/, tl/) and $OUT/gpu_graphs.txt. ~6.5 minutes.
#   GATE_COMMIT=<sha> bash bench/h200_check27.sh
export GATE_COMMIT=${GATE_COMMIT:-unknown}; R=$OUT
OUT=$R/gate bash bench/h200_gate.sh > /dev/null 2>&1; tail -2 $R/gate/gate.txt
export PYTHONPATH=/tmp/site KERNEL_AGENT_CACHE=/tmp/kacache-gate
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_truth_graphs.py tests/test_truth_worker.py > $R/gpu_graphs.txt 2>&1; tail -1 $R/gpu_graphs.txt
mkdir -p $R/tl; timeout 100 python3 bench/eval_phases.py problems/selective_scan.yaml problems/selective_scan/solutions/best.py --repeat 3 --json $R/tl/eval_phases.json 2>&1 | grep -v Warning > $R/tl/eval_phases.txt; grep -E "^ok|^[a-z]+ warm|phases" $R/tl/eval_phases.txt
timeout 240 python3 bench/timeline.py problems/selective_scan.yaml --parallel 1,2 --candidates 10 --cached --json $R/tl/timeline.json 2>&1 | grep -v Warning > $R/tl/timeline.txt; grep "^N=" -A3 $R/tl/timeline.txt
cd $R && rm -f gate/run.tar.gz && tar czf all.tgz gate tl gpu_graphs.txt && rm -rf gate tl && ls
