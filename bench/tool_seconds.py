"""Seconds per tool call as the model waits for them: wall time of `compile_kernel` and `benchmark` through
the default (warm) path, process start included. A benchmark, not a test.

    python -m bench.tool_seconds PROBLEM KERNEL.py [--runs 10] [--think 12] [--first-think S] [--cold 2] [--json OUT]

Measures, after one build of KERNEL (not counted):
  compile_unchanged  compile_kernel of the same source again (a build-cache hit)
  compile_edit       compile_kernel of a kernel-only edit: a new comment line before the first
                     `__global__`, so the CUDA object is rebuilt and the binding object reused (on a
                     C++ problem, after the first #include: the whole extension is rebuilt)
  benchmark_first    the process's first benchmark of it (warm workers starting; the reference timed
                     unless this host's cache has it); with `--first-think S`, S seconds after the
                     evaluation was prepared ahead as `agent run` does as it starts (the model's first turn)
  benchmark          benchmark of the compiled KERNEL, `--think` seconds after the previous call
                     returned (the model's turn, during which the next evaluation is prepared)
  benchmark_cold     the same with KERNEL_AGENT_WARM=0 (fresh processes for everything), `--cold` times
Prints medians and writes every call's seconds (and each benchmark's phases) to JSON.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tools import benchmark, compile_kernel
from tools.benchmark import prepare_ahead
from tools.envinfo import collect_env
from tools.problem import load_problem


def kernel_only_edit(code: str, i: int) -> str:
    """A new line in the kernel's source: before the first `__global__` (CUDA), else after the first
    `#include` line (C++)."""
    at = code.find("__global__")
    if at < 0:
        at = code.index("\n", code.index("#include")) + 1
    return f"{code[:at]}// edit {i} {uuid.uuid4().hex[:8]}\n{code[at:]}"


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    start = time.monotonic()
    result = fn(*args)
    return time.monotonic() - start, result


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    secs = [r["seconds"] for r in rows]
    return {
        "n": len(secs),
        "median_s": round(statistics.median(secs), 3) if secs else None,
        "min_s": round(min(secs), 3) if secs else None,
        "max_s": round(max(secs), 3) if secs else None,
        "statuses": sorted({r["status"] for r in rows}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem")
    parser.add_argument("kernel")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--think", type=float, default=12.0)
    parser.add_argument("--first-think", type=float, default=None, help="a run's start, then its first turn")
    parser.add_argument("--cold", type=int, default=2)
    parser.add_argument("--json", dest="json_out")
    parser.add_argument("--no-compiles", action="store_true", help="measure benchmarks only")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    code = Path(args.kernel).read_text()
    first = compile_kernel(problem, code)
    print(f"first build: {first.status} {first.seconds:.1f} s", flush=True)
    calls: dict[str, list[dict[str, Any]]] = {"compile_unchanged": [], "compile_edit": [], "benchmark": []}

    def save() -> None:  # after every section: a run cut short by its time limit keeps what it measured
        if args.json_out:
            env = collect_env(problem)
            record = {
                "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
                "gpu": env.gpu,
                "torch": env.torch,
                "harness_sha": env.harness_sha,
                "host_cores": os.cpu_count(),
                "problem": problem.name,
                "kernel": args.kernel,
                "think_s": args.think,
                "first_think_s": args.first_think,
                "summary": {name: summary(rows) for name, rows in calls.items() if rows},
                "calls": calls,
            }
            Path(args.json_out).write_text(json.dumps(record, indent=1))

    for _ in range(0 if args.no_compiles else args.runs):
        secs, r = timed(compile_kernel, problem, code)
        calls["compile_unchanged"].append({"seconds": secs, "status": r.status, "cached": r.cached})
    for i in range(0 if args.no_compiles else args.runs):
        secs, r = timed(compile_kernel, problem, kernel_only_edit(code, i))
        steps = [(c.output, c.object, round(c.seconds, 2)) for b in r.builds for c in b.compiles]
        calls["compile_edit"].append({"seconds": secs, "status": r.status, "compiles": steps})
    save()
    # The process's first evaluation (its warm workers start now; the reference is timed unless this host's
    # cache has it); the next evaluation is prepared meanwhile. Or, as in a run, prepared as it starts.
    if args.first_think is not None:
        prepare_ahead(problem)
        time.sleep(args.first_think)
    secs, r = timed(benchmark, problem, code)
    calls["benchmark_first"] = [
        {"seconds": secs, "status": r.status, "flags": r.flags, "workers": r.workers, "phases": r.phases}
    ]
    for _ in range(args.runs):
        time.sleep(args.think)
        secs, r = timed(benchmark, problem, code)
        calls["benchmark"].append(
            {"seconds": secs, "status": r.status, "flags": r.flags, "workers": r.workers, "phases": r.phases}
        )
        save()
    if args.cold:
        os.environ["KERNEL_AGENT_WARM"] = "0"
        calls["benchmark_cold"] = []
        for _ in range(args.cold):
            secs, r = timed(benchmark, problem, code)
            calls["benchmark_cold"].append(
                {"seconds": secs, "status": r.status, "workers": r.workers, "phases": r.phases}
            )
    table = {name: summary(rows) for name, rows in calls.items()}
    for name, row in table.items():
        print(
            f"{name:18s} n={row['n']:2d}  median {row['median_s']} s  (min {row['min_s']}, max {row['max_s']}) "
            f"{row['statuses']}"
        )
    bench_phases = [r["phases"] for r in calls["benchmark"]]
    if bench_phases:
        keys = sorted({k for p in bench_phases for k in p})
        med = {k: round(statistics.median(p.get(k, 0.0) for p in bench_phases), 3) for k in keys}
        print("benchmark phases (median s): " + ", ".join(f"{k} {v}" for k, v in med.items() if v >= 0.005))
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
