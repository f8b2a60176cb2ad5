#!/usr/bin/env bash
# What the GPU entry points share (bench/h200_gate.sh, h200_tier.sh, h200_sweep.sh, h200_throughput.sh,
# h200_profile.sh, h200_kernels.sh, h200_suite.sh). Sourcing defines functions only; a script then calls
# `h200_setup` to install the project. tests/test_gate_selection.py tests pytest_counts. Expects START (date +%s).
elapsed() { echo $(( $(date +%s) - START )); }
STEP_START=$(date +%s)
step_done() {  # step_done NAME: prints the seconds since the last step ended
  local now; now=$(date +%s)
  echo "step $1: $(( now - STEP_START )) s (at $(( now - START )) s)"
  STEP_START=$now
}
# Pytest's summary line → "P F" (passed, failed + errors); an empty or missing summary is "0 1".
pytest_counts() {  # pytest_counts LOG
  local summary p f e
  summary=$(grep -E "^=+ .*[0-9]+ (passed|failed|errors?|skipped|deselected)" "$1" | tail -1)
  [ -n "$summary" ] || { echo "0 1"; return; }
  p=$(echo "$summary" | grep -oE "[0-9]+ passed" | grep -oE "[0-9]+")
  f=$(echo "$summary" | grep -oE "[0-9]+ failed" | grep -oE "[0-9]+")
  e=$(echo "$summary" | grep -oE "[0-9]+ errors?" | grep -oE "[0-9]+")
  echo "${p:-0} $(( ${f:-0} + ${e:-0} ))"
}
machine_facts() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  # The installed versions without importing torch (an import cost the gate 4 s); the GPU is nvidia-smi's line.
  python3 -c "import importlib.util as u, pathlib, runpy; v = runpy.run_path(str(pathlib.Path(u.find_spec('torch').origin).with_name('version.py'))); print('torch', v['__version__'], 'cuda', v['cuda'])"
  echo "code: ${GATE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo 'commit unknown (no .git here)')}"
}
# Installs the project on a bare GPU machine (with .whl carried where it lacks pydantic/anthropic:
# ../shared/device/wheels.sh) and sets the environment every step shares. Expects OUT set.
h200_setup() {
  if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v "^$" | tail -2
  export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache-gate} MAX_JOBS=$(nproc)
  export KERNEL_AGENT_FIGURES="$OUT/figures.jsonl"  # tests that measure a figure append it here
  export KERNEL_AGENT_FAILURE_LOG="$OUT/gpu_failures.txt"  # each failing test's report, as it happens
  export KERNEL_AGENT_DURATIONS_LOG="$OUT/gpu_durations.txt"  # each test's seconds, as it ends
  unset ANTHROPIC_API_KEY OPENAI_API_KEY KERNEL_AGENT_WARM
  SOL=problems/selective_scan/solutions
}
