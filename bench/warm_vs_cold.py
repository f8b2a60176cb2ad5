"""Tool seconds per evaluation, cold (fresh processes) versus warm workers (tools/supervise/pool.py).

    python bench/warm_vs_cold.py                                   # CPU: scan_tiny, the shipped C++ baseline
    python bench/warm_vs_cold.py --problem problems/selective_scan.yaml \\
        --kernel problems/selective_scan/solutions/05_tuned.py --think 10 --out bench/results/warm_h200.json

The kernel is compiled (and the reference timed) once first, so every measured evaluation is of an
already-compiled candidate with a cached reference time, as in an agent's run. Cold evaluations use
KERNEL_AGENT_WARM=0; warm ones one `WarmPool`, `--think` seconds apart (the model's turn, during which
the next evaluation's truth is prepared). Prints a table of phases and writes JSON with every result.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools import benchmark, compile_kernel  # noqa: E402
from tools.problem import Problem, load_problem  # noqa: E402
from tools.results import BenchResult  # noqa: E402
from tools.supervise import WarmPool  # noqa: E402

DEFAULT_PROBLEM = REPO / "tests" / "problems" / "scan_tiny.yaml"
DEFAULT_KERNEL = REPO / "problems" / "selective_scan_cpu" / "solutions" / "baseline.py"


def _row(r: BenchResult) -> dict[str, Any]:
    return {
        "status": r.status,
        "correct": r.correct,
        "speedup": r.speedup,
        "seconds": round(r.seconds, 3),
        "phases": r.phases,
        "workers": r.workers,
    }


def _cold(problem: Problem, code: str, n: int) -> list[dict[str, Any]]:
    os.environ["KERNEL_AGENT_WARM"] = "0"
    try:
        return [_row(benchmark(problem, code)) for _ in range(n)]
    finally:
        os.environ["KERNEL_AGENT_WARM"] = "1"


def _warm(problem: Problem, code: str, n: int, think: float, ev: WarmPool) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        if i:
            time.sleep(think)
        rows.append(_row(benchmark(problem, code, pool=ev)))
    return rows


def _compile_hits(problem: Problem, code: str, ev: WarmPool) -> dict[str, float]:
    def timed(**kw: Any) -> float:
        start = time.monotonic()
        result = compile_kernel(problem, code, **kw)
        assert result.cached, result.message
        return round(time.monotonic() - start, 3)

    os.environ["KERNEL_AGENT_WARM"] = "0"
    cold = timed()
    os.environ["KERNEL_AGENT_WARM"] = "1"
    return {"cold": cold, "warm": timed(pool=ev)}


def _table(name: str, rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for r in rows for k in r["phases"]))
    lines = [f"{name}: " + ", ".join(f"{r['status']} {r['seconds']:.2f}s" for r in rows)]
    for k in keys:
        vals = [r["phases"].get(k, 0.0) for r in rows]
        lines.append(f"  {k:<17}" + " ".join(f"{v:7.2f}" for v in vals))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", type=Path, default=DEFAULT_PROBLEM)
    ap.add_argument("--kernel", type=Path, default=DEFAULT_KERNEL)
    ap.add_argument("--cold", type=int, default=3, help="cold evaluations")
    ap.add_argument("--warm", type=int, default=4, help="warm evaluations (the first starts the workers)")
    ap.add_argument("--think", type=float, default=3.0, help="seconds between warm evaluations")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    problem, code = load_problem(args.problem), args.kernel.read_text()
    os.environ["KERNEL_AGENT_WARM"] = "0"
    first = benchmark(problem, code)  # compiles, and times the reference into the cache
    print(f"first (compile + reference timing): {first.status} {first.seconds:.1f}s", flush=True)
    cold = _cold(problem, code, args.cold)
    print(_table("cold", cold), flush=True)
    ev = WarmPool()
    try:
        warm = _warm(problem, code, args.warm, args.think, ev)
        hits = _compile_hits(problem, code, ev)
    finally:
        ev.shutdown()
    print(_table("warm", warm), flush=True)
    steady = [r["seconds"] for r in warm[1:]] or [r["seconds"] for r in warm]
    summary = {
        "cold_median_s": statistics.median(r["seconds"] for r in cold),
        "warm_first_s": warm[0]["seconds"],
        "warm_median_s": statistics.median(steady),
        "compile_cache_hit_s": hits,
    }
    print(json.dumps(summary), flush=True)
    record = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "env": first.env.model_dump(),
        "problem": str(args.problem),
        "kernel": str(args.kernel),
        "think_s": args.think,
        "first": _row(first),
        "cold": cold,
        "warm": warm,
        "summary": summary,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(r["status"] == first.status for r in cold + warm) else 1


if __name__ == "__main__":
    sys.exit(main())
