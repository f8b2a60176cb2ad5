#!/usr/bin/env bash
# On the H200 (device tool), from the repo root, with .whl carried: every GPU exploit and fault test of issue 6,
# the evaluator's GPU tests, and the parent-side timeline of one selective-scan evaluation (cold build, then
# cached). Writes under $OUT: gpu_tests.txt, eval_phases_h200.json.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export PYTHONUNBUFFERED=1 KERNEL_AGENT_CACHE=${KERNEL_AGENT_CACHE:-/tmp/kacache} MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)" | tee -a "$OUT/gpu.txt"
timeout 300 python3 -m bench.eval_phases problems/selective_scan.yaml problems/selective_scan/solutions/best.py \
  --repeat 2 --json "$OUT/eval_phases_h200.json" 2>&1 | tail -45
timeout 420 python3 -m pytest -m gpu -v -p no:cacheprovider --timeout 150 \
  tests/adversarial/gpu/test_gpu_exploits.py tests/test_gpu_evaluator.py > "$OUT/gpu_tests.txt" 2>&1
tail -40 "$OUT/gpu_tests.txt"
