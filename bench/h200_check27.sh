#!/usr/bin/env bash
# One device call (.whl carried), from the repo root: the gate, the truth graphs' GPU tests, a fresh process's
# first evaluations of best.py, the timing rule's GPU test and bench/timeline.py with 1 and 2 trajectories (bench/h200_timeline.sh).
# Writes $OUT/all.tgz (gate/, tl/) and $OUT/gpu_graphs.txt. ~6.5 minutes.
#   GATE_COMMIT=<sha> bash bench/h200_check27.sh
export GATE_COMMIT=${GATE_COMMIT:-unknown}; R=$OUT
OUT=$R/gate bash bench/h200_gate.sh > /dev/null 2>&1; tail -2 $R/gate/gate.txt
export PYTHONPATH=/tmp/site KERNEL_AGENT_CACHE=/tmp/kacache-gate
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_truth_graphs.py tests/test_truth_worker.py tests/test_timing_rule.py > $R/gpu_graphs.txt 2>&1; tail -1 $R/gpu_graphs.txt
OUT=$R/tl CANDIDATES=10 bash bench/h200_timeline.sh 2>&1 | grep -E "^N=|^ok|phases|^step"
cd $R && rm -f gate/run.tar.gz && tar czf all.tgz gate tl gpu_graphs.txt && rm -rf gate tl && ls
