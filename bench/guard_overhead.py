"""What the part-1 guards cost: the honest CPU baseline evaluated by the harness before and after them.

"before" is `tools/` as of a git revision (exported with `git archive`), "after" is the working tree;
both use the same problems, build cache and reference-time cache. Evaluations alternate before/after
so drift in machine load hits both alike. Each evaluation runs in a fresh process (one harness per
process: two `tools` packages cannot share one). Reported per problem: the candidate's measured median
(the guards must leave it within noise) and the evaluation's wall time.

Usage: python bench/guard_overhead.py --before REV [--reps 3] [--out bench/results/guard_overhead_cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = {
    "scan_tiny": REPO / "tests" / "problems" / "scan_tiny.yaml",
    "selective_scan_cpu": REPO / "problems" / "selective_scan_cpu.yaml",
}
BASELINE = REPO / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py"

_ONE_EVAL = """
import json, sys
try:
    from tools import benchmark
except ImportError:  # a revision from before tools/benchmark.py
    from tools.judge import benchmark
from tools.problem import load_problem
r = benchmark(load_problem(sys.argv[1]), open(sys.argv[2]).read())
t = r.primary_timing
print(json.dumps({"status": r.status, "flags": r.flags, "seconds": r.seconds,
                  "median_ms": t.candidate.median_ms if t and t.candidate else None,
                  "rse": t.candidate.rse if t and t.candidate else None,
                  "isolation": getattr(r.env, "isolation", "")}))
"""


def export_tools(rev: str, dest: Path) -> Path:
    """`tools/` as of `rev`, alone in `dest` (the harness root the workers will import from)."""
    blob = subprocess.run(["git", "-C", str(REPO), "archive", rev, "tools"], capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(blob.stdout)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def evaluate(root: Path, problem: Path, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root), "KERNEL_AGENT_CACHE": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", _ONE_EVAL, str(problem), str(BASELINE)],
        capture_output=True, text=True, env=env, cwd=root, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    meds = [r["median_ms"] for r in runs if r["median_ms"] is not None]
    secs = [r["seconds"] for r in runs]
    return {
        "median_ms": statistics.median(meds) if meds else None,
        "wall_s": statistics.median(secs),
        "runs": runs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision of tools/ without the guards")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "guard_overhead_cpu.json")
    args = ap.parse_args()
    import torch

    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="guard-overhead-") as tmp:
        before = export_tools(args.before, Path(tmp) / "before")
        trees = {"before": before, "after": REPO}
        cache = Path(tmp) / "cache"
        results: dict[str, Any] = {}
        for name, problem in PROBLEMS.items():
            for root in trees.values():  # warm-up: the build and the reference time, not measured
                evaluate(root, problem, cache)
            runs: dict[str, list[dict[str, Any]]] = {k: [] for k in trees}
            for _ in range(args.reps):
                for label, root in trees.items():
                    runs[label].append(evaluate(root, problem, cache))
            b, a = summarise(runs["before"]), summarise(runs["after"])
            results[name] = {
                "before": b,
                "after": a,
                "median_ms_change": a["median_ms"] / b["median_ms"] - 1 if b["median_ms"] else None,
                "wall_s_change": a["wall_s"] - b["wall_s"],
            }
            print(f"{name}: median {b['median_ms']:.4g} → {a['median_ms']:.4g} ms, wall {b['wall_s']:.2f} → "
                  f"{a['wall_s']:.2f} s")  # fmt: skip
    record = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "before_rev": args.before,
        "reps": args.reps,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "note": "shared machine (other helpers' builds and tests run alongside); medians of alternating runs",
        "problems": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
