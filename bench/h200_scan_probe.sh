#!/usr/bin/env bash
# Selective-scan variants on a bare GPU machine, from the repo root (.whl carried for the `bench` step):
#   VARS="best.py 14_pairs_fastsp.py" bash bench/h200_scan_probe.sh
#   STEPS="bench variants" BENCH="best.py alt/16_pairs8_fastsp.py:sanitize" VARS="..." bash bench/h200_scan_probe.sh
# STEPS (any of, run in this order; default "variants ncu sass"):
#   bench     the real evaluator, `agent bench --json` (`--sanitize` where an entry ends in :sanitize), on each
#             of BENCH, after installing the project
#   variants  bench/scan_variants.py on VARS (paths under problems/selective_scan/solutions/): builds them in
#             parallel, checks every case against float64 truth (its long_memory bound has no calibration,
#             so its `pass` there is stricter than the evaluator's), times the three shapes; SWEEP=1,2 and
#             SWEEPV=<names> for a FORCE_CHUNKS sweep
#   ncu       Nsight Compute on one forward at shape 1 (bench/ncu_forward.py) of each of NCU_VARS (default
#             VARS): speed of light, occupancy, warp state (each stall reason's warps per issue), instruction
#             and launch statistics per kernel
#   probe     bench/launch_probe.py on PROBE: the host's time to issue a forward, the core idle or busy before
#             (PROBE_FLAGS="--guard --contain": then under the worker's audit hook and its old seccomp path)
#   sass      cuobjdump -sass of every extension built, where the machine has cuobjdump
# An entry of VARS, BENCH, NCU_VARS or PROBE is a file under problems/selective_scan/solutions/, or
# FILE@NAME=V[,NAME=V]: that file with those `#define` lines changed and its extension renamed, written to
# /tmp/derived/ (the scan variants differ only so: 14_pairs_fastsp.py@SS_G=8 has 8 lanes a channel pair).
# Writes under $OUT: bench_<v>.json, scan_variants.json, sv.txt, ncu_<v>.txt, launch_probe.json, sass_<ext>.txt.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
START=$(date +%s)
. bench/h200_lib.sh
STEPS=${STEPS:-variants ncu sass}
has() { [[ " $STEPS " == *" $1 "* ]]; }
machine_facts | tee "$OUT/gpu.txt"
SOL=problems/selective_scan/solutions
VARS=${VARS:-"best.py"}
export MAX_JOBS=$(nproc) TORCH_EXTENSIONS_DIR=/tmp/ext
# path_of ENTRY: the module an entry names, derived first where it changes #defines (see above).
path_of() {
  local file=${1%%@*}
  [ "$file" = "$1" ] && { echo "$SOL/$file"; return; }
  mkdir -p /tmp/derived
  python3 - "$SOL/$file" "${1#*@}" /tmp/derived <<'PY'
import re, sys
from pathlib import Path
src, defs, folder = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
text, tag = src.read_text(), ""
for item in defs.split(","):
    name, value = item.split("=")
    text, n = re.subn(rf"^#define {name} .*$", f"#define {name} {value}", text, count=1, flags=re.M)
    if n != 1:
        sys.exit(f"{src}: no '#define {name}' to change")
    tag += f"_{name.lower()}{value}"
text, n = re.subn(r'name="(\w+)"', lambda m: f'name="{m.group(1)}{tag}"', text, count=1)
if n != 1:
    sys.exit(f"{src}: no load_inline name to rename")
out = folder / f"{src.stem}{tag}.py"
out.write_text(text)
print(out)
PY
}
paths_of() { for entry in "$@"; do path_of "$entry"; done; }

if has bench; then
  h200_setup >/dev/null 2>&1
  step_done install
  for item in ${BENCH:-best.py}; do
    v=$(path_of "${item%%:*}") || continue; n=$(basename "$v" .py); flags=""
    [ "$item" != "${item%:sanitize}" ] && { flags="--sanitize"; n="${n}_sanitize"; }
    k=2; m=$n; while [ -e "$OUT/bench_$n.json" ]; do n="${m}_$k"; k=$((k + 1)); done  # a repeat: its own file
    timeout 200 agent bench problems/selective_scan.yaml "$v" $flags --json > "$OUT/bench_$n.json" 2>/dev/null
    python3 - "$OUT/bench_$n.json" "$n" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError:
    print(sys.argv[2], "no result"); raise SystemExit
def row(t):
    c = t["candidate"]
    return (f"{t['name']}: {c['median_ms']:.4f} ms (events {c.get('event_median_ms') or 0:.4f}, "
            f"issue {c.get('launch_median_ms') or 0:.3f} (min {c.get('launch_min_ms') or 0:.3f}), "
            f"hold {c.get('hold_median_ms') or 0:.3f})")
rows = [row(t) for t in d["timings"] if t.get("candidate")]
print(sys.argv[2], d["status"], d["speedup"], d["flags"], "; ".join(rows) or d["message"][:300])
PY
    step_done "bench $n"
  done
fi
if has variants; then
  timeout "${SV_S:-300}" python3 bench/scan_variants.py --variants $(paths_of $VARS) \
    --iters "${ITERS:-30}" ${SWEEP:+--sweep $SWEEP} ${SWEEPV:+--sweep-variants $SWEEPV} --out "$OUT" > "$OUT/sv.txt" 2>&1
  grep -v Warning "$OUT/sv.txt" | tail -12
  step_done variants
fi
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if has ncu && [ -n "$NCU" ]; then
  for v in $(paths_of ${NCU_VARS-$VARS}); do
    n=$(basename "$v" .py)
    timeout 90 "$NCU" --profile-from-start off --kernel-name regex:^ss --section SpeedOfLight --section Occupancy \
      --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section LaunchStats --section InstructionStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python3 bench/ncu_forward.py "$v" > "$OUT/ncu_$n.txt" 2>&1
    echo "== $n"
    grep -E "^  [a-z].*\(|Duration|Issue Slots Busy|Achieved Occupancy|Registers Per|Executed Instructions  " \
      "$OUT/ncu_$n.txt" | sed 's/(const float \*.*//' | head -24
  done
  step_done ncu
fi
if has probe; then
  timeout 150 python3 -m bench.launch_probe $(paths_of ${PROBE:-best.py}) --calls "${PROBE_CALLS:-60}" \
    ${PROBE_FLAGS:-} --json "$OUT/launch_probe.json" 2>&1 | grep -v "Warning\|warn" | grep -v "^  [cg]pu " | tail -30
  step_done probe
fi
CUOBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if has sass && [ -n "$CUOBJ" ]; then
  for so in $(find /tmp/ext -name "*.so" 2>/dev/null); do
    "$CUOBJ" -sass "$so" > "$OUT/sass_$(basename "$so" .so).txt" 2>&1
  done
  step_done sass
fi
