"""Honest kernels evaluated back to back, half of the rounds with every CPU core busy: every verdict must
be `ok` with no flag. A benchmark of the timing guards' false-positive rate, not a test.

    python bench/honest_sweep.py PROBLEM KERNEL.py [KERNEL.py ...] --rounds 6 --json OUT.json

Rounds alternate quiet and loaded (`--load-every 2`); a loaded round runs one busy-looping process per
core (`--hogs N` to change that) for its whole duration. Every kernel is compiled once first. Prints one
line per evaluation (status, flags, primary-shape median, host and escaped medians, the headline and the
eager speedup) and a summary.

Stability (issue 50; docs/ranking.md): per kernel, the headline figure's max/min over its evaluations (the
share of the floor, else the speedup against the launch-free reference) next to the launch-free speedup's
and the eager speedup's. The headline must hold within 1.10; the eager speedup of a launch-bound reference
read 169/126 = 1.34 on one quiet H200.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools import benchmark, compile_kernel  # noqa: E402
from tools.envinfo import collect_env  # noqa: E402
from tools.problem import load_problem  # noqa: E402
from tools.results import BenchResult, EnvInfo  # noqa: E402

HOG = "while True: pass"


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """`n` processes spinning at 100% of a core each, killed on exit."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    try:
        time.sleep(0.5)  # every hog running before the evaluation starts
        yield
    finally:
        for proc in hogs:
            proc.kill()
        for proc in hogs:
            proc.wait()


def row(kernel: str, loaded: bool, r: BenchResult) -> dict[str, Any]:
    prim = r.primary_timing
    cand = prim.candidate if prim else None
    return {
        "kernel": kernel,
        "loaded": loaded,
        "status": r.status,
        "correct": r.correct,
        "flags": r.flags,
        "message": r.message[:400] if r.status != "ok" else "",
        "speedup": r.speedup,  # vs the launch-free reference
        "eager_speedup": r.eager_speedup,
        "headline_metric": r.figures.metric if r.figures else None,
        "headline": r.figures.value if r.figures else None,
        "floor_fraction": r.figures.floor_fraction if r.figures else None,
        "reference_mode": r.figures.reference_mode if r.figures else None,
        "reference_note": r.figures.reference_note if r.figures else "",
        "seconds": round(r.seconds, 2),
        "notices": r.notices,
        "shapes": [
            {
                "name": t.name,
                **(
                    t.candidate.model_dump(
                        include={
                            "median_ms",
                            "rse",
                            "host_median_ms",
                            "escaped_median_ms",
                            "launch_median_ms",
                        }
                    )
                    if t.candidate
                    else {}
                ),
            }
            for t in r.timings
        ],
        "primary_ms": cand.median_ms if cand else None,
        "reference_ms": prim.reference.median_ms if prim and prim.reference else None,
        "launch_free_ms": prim.launch_free.stats.median_ms
        if prim and prim.launch_free and prim.launch_free.stats
        else None,
        "reference_cached": bool(prim and prim.reference_cached),
        "reference_check_ms": prim.reference_check.median_ms if prim and prim.reference_check else None,
    }


def speedup_medians(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per kernel, the median speedup of its quiet and of its loaded evaluations: an honest ratio does not
    move with the host's load (a reference checked on a busy host once moved the best from 149x to 208x)."""
    out: dict[str, dict[str, float | None]] = {}
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        medians: dict[str, float | None] = {}
        for mode, loaded in (("quiet", False), ("loaded", True)):
            picked = [r["speedup"] for r in rows if r["kernel"] == kernel and r["loaded"] == loaded]
            speedups = [s for s in picked if s is not None]
            medians[mode] = statistics.median(speedups) if speedups else None
        out[Path(kernel).stem] = medians
    return out


def spread(values: list[float | None]) -> dict[str, float | None]:
    """Max, min and max/min of the values given (None where there are none)."""
    got = [v for v in values if v is not None and v > 0]
    if not got:
        return {"max": None, "min": None, "max_over_min": None}
    return {"max": max(got), "min": min(got), "max_over_min": max(got) / min(got)}


STABLE = 1.10  # the headline's max/min over one kernel's sweep, at most (issue 50)


def stability(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kernel, the headline's max/min beside the launch-free and the eager speedups' (quiet and loaded
    rounds together): the figure a user compares runs by must not move with the reference's windows."""
    out: dict[str, dict[str, Any]] = {}
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        mine = [r for r in rows if r["kernel"] == kernel]
        metrics = {r.get("headline_metric") for r in mine} - {None}
        headline = spread([r.get("headline") for r in mine])
        ratio = headline["max_over_min"]
        out[Path(kernel).stem] = {
            "headline_metric": metrics.pop() if len(metrics) == 1 else sorted(metrics),
            "headline": headline,
            "launch_free_speedup": spread([r.get("speedup") for r in mine]),
            "eager_speedup": spread([r.get("eager_speedup") for r in mine]),
            "stable": ratio is not None and ratio <= STABLE,
        }
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    bad = [r for r in rows if r["status"] != "ok" or r["flags"]]
    return {
        "evaluations": len(rows),
        "loaded": sum(r["loaded"] for r in rows),
        "ok_clean": len(rows) - len(bad),
        "not_ok_or_flagged": len(bad),
        "speedup_medians": speedup_medians(rows),
        "stability": stability(rows),
    }


def stability_lines(summary: dict[str, Any]) -> list[str]:
    """`best: headline floor_fraction max/min 1.04 (0.41-0.43) · launch-free 1.04 · eager 1.34 (126-169)`."""

    def fmt(s: dict[str, float | None]) -> str:
        if s["max_over_min"] is None:
            return "n/a"
        return f"{s['max_over_min']:.3f} ({s['min']:.4g}-{s['max']:.4g})"

    return [
        f"{kernel}: headline {v['headline_metric']} max/min {fmt(v['headline'])} "
        f"{'<=' if v['stable'] else 'NOT <='} {STABLE} · launch-free speedup {fmt(v['launch_free_speedup'])} · "
        f"eager speedup {fmt(v['eager_speedup'])}"
        for kernel, v in summary["stability"].items()
    ]


def write_record(path: Path, env: EnvInfo, hogs: int, rows: list[dict[str, Any]]) -> None:
    record = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "gpu": env.gpu,
        "torch": env.torch,
        "harness_sha": env.harness_sha,
        "host_cores": os.cpu_count(),
        "hogs": hogs,
        "summary": summarize(rows),
        "rows": rows,
    }
    path.write_text(json.dumps(record, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem")
    parser.add_argument("kernels", nargs="+")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--load-every", type=int, default=2, help="every k-th round is loaded (0: none)")
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    codes = {k: Path(k).read_text() for k in args.kernels}
    for name, code in codes.items():
        comp = compile_kernel(problem, code)
        print(f"compiled {name}: {comp.status} {comp.seconds:.1f} s", flush=True)
    rows: list[dict[str, Any]] = []
    env = collect_env(problem)
    for i in range(args.rounds):
        loaded = args.load_every > 0 and i % args.load_every == args.load_every - 1
        with busy_cores(args.hogs) if loaded else contextlib.nullcontext():
            for name, code in codes.items():
                r = row(name, loaded, benchmark(problem, code))
                rows.append(r)
                shape = r["shapes"][0] if r["shapes"] else {}
                print(
                    f"round {i} {'loaded' if loaded else 'quiet '} {Path(name).stem:24s} {r['status']:10s} "
                    f"{','.join(r['flags']) or '-':18s} {r['seconds']:6.1f} s  "
                    f"median {shape.get('median_ms') or 0:.3f} host {shape.get('host_median_ms') or 0:.3f} "
                    f"escaped {shape.get('escaped_median_ms') or 0:.4f} ms  headline {r['headline'] or 0:.4g} "
                    f"({r['headline_metric']}) launch-free {r['speedup'] or 0:.1f}x (ref {r['launch_free_ms'] or 0:.2f} "
                    f"ms, {r['reference_mode']}) eager {r['eager_speedup'] or 0:.1f}x "
                    f"ref {r['reference_ms'] or 0:.1f} {'cached' if r['reference_cached'] else 'now'} "
                    f"check {r['reference_check_ms'] or 0:.1f} ms {r['message'][:160]}",
                    flush=True,
                )
                if args.json_out:  # after every evaluation: a sweep cut by its time limit keeps what ran
                    write_record(Path(args.json_out), env, args.hogs, rows)
    summary = summarize(rows)
    print(json.dumps(summary))
    print("\n".join(stability_lines(summary)))
    bad = summary["not_ok_or_flagged"]
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
