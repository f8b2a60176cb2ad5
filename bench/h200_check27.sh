#!/usr/bin/env bash
# One device call (.whl carried), from the repo root: the gate, the truth graphs' and timing rule's GPU tests,
# bench/timeline.py with 1 and 2 trajectories and a fresh process's first evaluations (bench/h200_timeline.sh),
# then a new host's first benchmark 10 s after a run's start (bench/tool_seconds.py --first-think 10, a cache
# of its own: no reference medians, no builds). Writes $OUT/all.tgz (gate/, tl/, first/) and
# $OUT/gpu_graphs.txt. ~8 minutes. SWEEP_ROUNDS=N (SWEEP_S seconds at most) adds bench/honest_sweep.py;
# FIRST=0 and PHASES=0 leave out the first benchmark and the stamped evaluations.
#   GATE_COMMIT=<sha> bash bench/h200_check27.sh
export GATE_COMMIT=${GATE_COMMIT:-unknown}; R=$OUT; SOL=problems/selective_scan/solutions
OUT=$R/gate bash bench/h200_gate.sh > /dev/null 2>&1; tail -2 $R/gate/gate.txt
export PYTHONPATH=/tmp/site KERNEL_AGENT_CACHE=/tmp/kacache-gate
# with the evaluator's tests of what is made ahead: the next truth beside another evaluation, the pinned
# buffer of a worker made ahead, a worker made ahead at all (the gate's builds serve them)
timeout 180 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_truth_graphs.py tests/test_truth_worker.py \
  tests/test_timing_rule.py tests/test_kept_outputs.py tests/test_gpu_evaluator.py \
  -k "not test_gpu_evaluator or made_ahead or beside_another" > $R/gpu_graphs.txt 2>&1; tail -1 $R/gpu_graphs.txt
mkdir -p $R/tl  # TIMELINE=0: the gate and the first benchmark only (~5 minutes)
[ "${TIMELINE:-1}" = 1 ] && OUT=$R/tl CANDIDATES=${CANDIDATES:-10} bash bench/h200_timeline.sh 2>&1 | grep -E "^N=|^ok|phases|^step"
mkdir -p $R/first
if [ "${FIRST:-1}" = 1 ]; then  # FIRST=0: no new host's first benchmark
  KERNEL_AGENT_CACHE=/tmp/kacache-new-host timeout 150 python3 -m bench.tool_seconds \
    problems/selective_scan.yaml problems/selective_scan/solutions/best.py --runs 2 --think 10 --first-think 10 \
    --cold 0 --no-compiles --json $R/first/first_think10.json 2>&1 | grep -v Warning > $R/first/first_think10.txt
  tail -4 $R/first/first_think10.txt
fi
if [ "${PHASES:-1}" = 1 ]; then  # the same first evaluation's steps, each worker message stamped (a cache of
  # its own again: the reference timed, the peaks measured, the truth's forwards run eagerly at first)
  KERNEL_AGENT_CACHE=/tmp/kacache-new-host2 timeout 90 python3 bench/eval_phases.py problems/selective_scan.yaml \
    $SOL/best.py --repeat 1 --json $R/first/new_host_phases.json 2>&1 | grep -v Warning > $R/first/new_host_phases.txt
  head -2 $R/first/new_host_phases.txt
fi
if [ "${SWEEP_ROUNDS:-0}" -gt 0 ]; then  # honest evaluations back to back, every other round beside busy cores
  timeout ${SWEEP_S:-120} python3 bench/honest_sweep.py problems/selective_scan.yaml $SOL/best.py $SOL/04_chunked_scan.py \
    $SOL/01_naive_fused.py --rounds $SWEEP_ROUNDS --load-every 2 --json $R/first/honest_sweep.json 2>&1 \
    | grep -v Warning > $R/first/honest_sweep.txt; tail -3 $R/first/honest_sweep.txt
fi
cd $R && rm -f gate/run.tar.gz && tar czf all.tgz gate tl first gpu_graphs.txt && rm -rf gate tl first && ls
