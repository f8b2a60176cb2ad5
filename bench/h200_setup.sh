#!/usr/bin/env bash
# Sourced by the H200 scripts (bench/h200_gate.sh, bench/h200_gpu_tests.sh): installs the project on a bare
# GPU machine (with .whl carried where it lacks pydantic/anthropic: ../shared/device/wheels.sh), sets the
# environment every step shares, and the helpers of bench/h200_lib.sh. Expects START (date +%s) and OUT set.
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^$" | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache-gate} MAX_JOBS=$(nproc)
export KERNEL_AGENT_FIGURES="$OUT/figures.jsonl"  # tests that measure a figure append it here
export KERNEL_AGENT_FAILURE_LOG="$OUT/gpu_failures.txt"  # each failing test's report, as it happens
export KERNEL_AGENT_DURATIONS_LOG="$OUT/gpu_durations.txt"  # each test's seconds, as it ends
unset ANTHROPIC_API_KEY KERNEL_AGENT_WARM
SOL=problems/selective_scan/solutions

. bench/h200_lib.sh
