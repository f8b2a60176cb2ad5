#!/usr/bin/env bash
# Functions the H200 scripts share (sourced by bench/h200_setup.sh; tests/test_gate_selection.py tests them).
# Expects START (date +%s).
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
