"""Who waits for what when trajectories share one device: a benchmark, not a test.

    python bench/timeline.py problems/selective_scan.yaml --parallel 1,2 --candidates 12 --cached
    python bench/timeline.py problems/selective_scan.yaml --parallel 1,2,4 --cached --share-truth off,on \
        --summary OUT/throughput_summary.json

Runs N trajectories back to back, as bench/throughput.py does (the same candidates and executor), while
`tools.supervise.listen` hears every evaluation's turns on the device, each truth server request (asked,
taken, answered) and each candidate worker's life. Prints, per N: candidates an hour; how much of the wall
time the device was held exclusively (a timed loop), shared only (checks, truth, a live candidate) or not
at all; how busy the truth servers were and how long each kind of request queued; a strip chart of the
first seconds. Which resource is saturated says what a second trajectory can still overlap. `--share-truth
off,on` measures each N with truth made for every evaluation, then with input sets shared between candidates'
evaluations in flight (KERNEL_AGENT_SHARE_TRUTH, tools/judge/_share.py); `--summary` writes one compact
object per configuration (candidates an hour and against N=1, the truth servers' busy share, overlapping
timing leases, where each evaluation's truth came from, the host time to the first launch).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.execution.executor import KernelJob, LeasedExecutor  # noqa: E402
from agent.execution.leases import Leases  # noqa: E402
from agent.runlog.data import lease_spans, overlapping_leases  # noqa: E402
from agent.runlog.events import LeaseEvent  # noqa: E402
from bench.throughput import (  # noqa: E402
    WARM_UP_ROUNDS,
    cached_candidates,
    candidates,
    hardware,
    settle,
    warm_up,
)
from tools.judge import SHARE_ENV  # noqa: E402
from tools.problem import Problem, load_problem  # noqa: E402
from tools.supervise import listen  # noqa: E402

Span = tuple[float, float]
Event = tuple[float, int, str, str, str | None]  # (seconds since start, thread, who, event, name)


def record(events: list[Event], t0: float) -> Any:
    lock = threading.Lock()

    def hear(who: str, event: str, name: str | None) -> None:
        with lock:
            events.append((time.monotonic() - t0, threading.get_ident(), who, event, name))

    return hear


def device_spans(events: list[Event]) -> dict[str, list[Span]]:
    """Each evaluation's (each DeviceTurns') shared and exclusive holds, from its `device` events."""
    open_: dict[str, tuple[str, float]] = {}
    spans: dict[str, list[Span]] = defaultdict(list)
    for t, _, who, event, name in events:
        if who != "device" or name is None:
            continue
        if name in open_:
            mode, since = open_.pop(name)
            spans[mode].append((since, t))
        if event != "none":
            open_[name] = (event, t)
    end = events[-1][0] if events else 0.0
    for mode, since in open_.values():
        spans[mode].append((since, end))
    return spans


def paired(events: list[Event], who: str, begin: str, end: str) -> list[tuple[Span, str | None]]:
    """`who`'s spans from `begin` to `end`, told in one thread each (a request, a worker's life)."""
    started: dict[int, tuple[float, str | None]] = {}
    spans = []
    for t, thread, w, event, name in events:
        if w != who:
            continue
        if event == begin:
            started[thread] = (t, name)
        elif event == end and thread in started:
            since, label = started.pop(thread)
            spans.append(((since, t), label))
    return spans


def union(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def length(spans: list[Span]) -> float:
    return sum(b - a for a, b in union(spans))


def minus(spans: list[Span], cut: list[Span]) -> list[Span]:
    """The parts of `spans` outside `cut`."""
    out = []
    for a, b in union(spans):
        pieces = [(a, b)]
        for c, d in union(cut):
            pieces = [p for x, y in pieces for p in ((x, min(y, c)), (max(x, d), y)) if p[1] > p[0]]
        out += pieces
    return out


def summary(events: list[Event], wall: float) -> dict[str, Any]:
    dev = device_spans(events)
    exclusive = union(dev.get("exclusive", []))
    shared_only = minus(dev.get("shared", []), exclusive)
    requests = paired(events, "truth", "spawn", "exit")
    asked = paired(events, "truth", "asked", "spawn")
    workers = paired(events, "candidate", "spawn", "exit")
    kinds: dict[str, dict[str, float]] = {}
    for (a, b), kind in requests:
        row = kinds.setdefault(kind or "?", {"count": 0, "seconds": 0.0, "queued": 0.0})
        row["count"] += 1
        row["seconds"] += b - a
    for (a, b), kind in asked:
        kinds.setdefault(kind or "?", {"count": 0, "seconds": 0.0, "queued": 0.0})["queued"] += b - a
    share = (lambda s: round(100 * s / wall, 1)) if wall else (lambda s: 0.0)
    return {
        "device_exclusive_pct": share(length(exclusive)),
        "device_shared_only_pct": share(length(shared_only)),
        "device_idle_pct": share(wall - length(exclusive) - length(shared_only)),
        "truth_busy_pct": share(length([s for s, _ in requests])),
        "truth_request_s": round(sum(b - a for (a, b), _ in requests), 2),
        "candidate_alive_pct": share(length([s for s, _ in workers])),
        "requests": {
            k: {
                "count": int(v["count"]),
                "mean_s": round(v["seconds"] / v["count"], 3) if v["count"] else 0.0,
                "mean_queued_s": round(v["queued"] / v["count"], 3) if v["count"] else 0.0,
            }
            for k, v in kinds.items()
        },
    }


PHASES = ("truth_wait", "cases", "timing", "candidate_exit", "judge", "reference_check", "seconds")


def phase_means(phases: list[dict[str, float]]) -> str:
    """Each main phase's mean seconds an evaluation: where a second trajectory's evaluations spend longer."""
    if not phases:
        return "no evaluation"
    return ", ".join(f"{k} {sum(p.get(k, 0.0) for p in phases) / len(phases):.2f}" for k in PHASES)


def speedup_shift(base: list[tuple[str, float]], other: list[tuple[str, float]]) -> float | None:
    """The median, over kernels evaluated in both, of one kernel's median speedup in `other` over its median in
    `base`: whether running beside other trajectories moved the speedups reported (a reference slowed by a
    busier host reads as a faster candidate)."""

    def medians(rows: list[tuple[str, float]]) -> dict[str, float]:
        by: dict[str, list[float]] = defaultdict(list)
        for kernel, speedup in rows:
            by[kernel].append(speedup)
        return {k: statistics.median(v) for k, v in by.items()}

    a, b = medians(base), medians(other)
    ratios = [b[k] / a[k] for k in a.keys() & b.keys() if a[k] > 0]
    return statistics.median(ratios) if ratios else None


def strip(
    events: list[Event], evaluations: list[tuple[int, float, float]], seconds: float, step: float
) -> str:
    """A chart of the first `seconds`: the device (E exclusive, s shared, . idle), the truth servers'
    requests and the candidate workers alive (a digit: how many), each trajectory's evaluations (#)."""
    dev = device_spans(events)
    rows = {
        "device": lambda t: (
            "E" if inside(t, dev.get("exclusive", [])) else "s" if inside(t, dev.get("shared", [])) else "."
        ),
        "truth": count_at([s for s, _ in paired(events, "truth", "spawn", "exit")]),
        "workers": count_at([s for s, _ in paired(events, "candidate", "spawn", "exit")]),
    }
    for number in sorted({n for n, _, _ in evaluations}):
        rows[f"traj {number}"] = count_at([(a, b) for n, a, b in evaluations if n == number], mark="#")
    ticks = [i * step for i in range(int(seconds / step))]
    lines = [f"{name:>8} |" + "".join(fn(t) for t in ticks) for name, fn in rows.items()]
    return "\n".join(lines) + f"\n{'':>8}  one column = {step:g} s"


def inside(t: float, spans: list[Span]) -> bool:
    return any(a <= t < b for a, b in spans)


def count_at(spans: list[Span], mark: str = "") -> Any:
    def at(t: float) -> str:
        n = sum(1 for a, b in spans if a <= t < b)
        return "." if n == 0 else mark or str(min(n, 9))

    return at


def device_memory_mib() -> int | None:
    """The GPU's memory in use now, all processes together (nvidia-smi: the harness never starts CUDA)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "--id=0"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


class PeakMemory:
    """The most device memory in use while the block runs, sampled every `every` seconds (three truth servers'
    graphs and kept truth, the workers made ahead, the candidates)."""

    def __init__(self, every: float = 1.0) -> None:
        self.every, self.peak = every, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            used = device_memory_mib()
            if used is None:
                return
            self.peak = max(self.peak or 0, used)
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(
    problem: Problem,
    parallel: int,
    codes: list[str],
    think: float,
    gpus: list[int] | None,
    per_gpu: int | None = None,
) -> dict[str, Any]:
    executor = LeasedExecutor(Leases(gpus, per_gpu=per_gpu))
    warm_up_s = warm_up(problem, executor, codes, parallel)
    settle(problem, gpus)
    leases: list[LeaseEvent] = []
    executor.on_event = leases.append
    sources: dict[str, int] = defaultdict(int)
    first_launch: list[float] = []
    todo: queue.Queue[str] = queue.Queue()
    for code in codes:
        todo.put(code)
    events: list[Event] = []
    evaluations: list[tuple[int, float, float]] = []
    phases: list[dict[str, float]] = []
    speedups: list[tuple[str, float]] = []
    t0 = time.monotonic()

    def trajectory(number: int) -> None:
        while True:
            try:
                code = todo.get_nowait()
            except queue.Empty:
                return
            time.sleep(think)
            begin = time.monotonic() - t0
            result = executor.benchmark(KernelJob(problem, code, trajectory=number))
            evaluations.append((number, begin, time.monotonic() - t0))
            phases.append({**result.phases, "seconds": result.seconds, "ok": float(result.status == "ok")})
            sources[result.truth_source] += 1
            if result.usage is not None and result.usage.first_launch_ms is not None:
                first_launch.append(result.usage.first_launch_ms)
            if result.speedup is not None:
                speedups.append((result.kernel_hash, result.speedup))

    with PeakMemory() as memory, listen(record(events, t0)), cf.ThreadPoolExecutor(parallel) as pool:
        list(pool.map(trajectory, range(1, parallel + 1)))
    wall = time.monotonic() - t0
    return {
        "parallel": parallel,
        "evals_per_gpu": executor.leases.gpu_pool.per_gpu if executor.leases.gpu_pool else None,
        "warm_up_s": warm_up_s,
        "candidates": len(evaluations),
        "correct": int(sum(p["ok"] for p in phases)),
        "wall_s": round(wall, 2),
        "per_hour": round(len(evaluations) / wall * 3600, 1) if wall else 0.0,
        **summary(events, wall),
        "chart": strip(events, evaluations, min(wall, 60.0), 0.25),
        "evaluations": evaluations,
        "phases": phases,
        "speedups": speedups,
        "device_memory_peak_mib": memory.peak,
        "timing_lease_overlaps": len(
            overlapping_leases(lease_spans(list(leases)), problem.spec.device != "cuda")
        ),
        "truth_sources": dict(sources),
        "first_launch_ms_median": round(statistics.median(first_launch), 4) if first_launch else None,
        "events": events,
    }


SUMMARY_KEYS = (
    "share_truth", "evals_per_gpu", "parallel", "candidates", "correct", "wall_s", "per_hour", "x_one", "truth_busy_pct",
    "device_exclusive_pct", "device_shared_only_pct", "device_idle_pct", "timing_lease_overlaps", "truth_sources",
    "first_launch_ms_median", "device_memory_peak_mib", "warm_up_s",
)  # fmt: skip


def compact(row: dict[str, Any], rows: list[dict[str, Any]], info: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures for the summary: candidates an hour against the same mode's N=1 (`x_one`)."""
    # N=1 holds one evaluation in flight whatever a GPU takes: any of the mode's N=1 rows is its baseline
    one = next((r for r in rows if r["parallel"] == 1 and r["share_truth"] == row["share_truth"]), None)
    x_one = round(row["per_hour"] / one["per_hour"], 2) if one and one["per_hour"] else None
    figures = {k: row.get(k) for k in SUMMARY_KEYS if k != "x_one"}
    # The scripted candidates are all correct: any other verdict is a false one.
    return {**info, **figures, "x_one": x_one, "not_ok": row["candidates"] - row["correct"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("--parallel", default="1,2")
    p.add_argument("--candidates", type=int, default=12, help="candidates per configuration")
    p.add_argument("--think", type=float, default=0.0)
    p.add_argument("--cached", action="store_true", help="build every candidate first; time evaluation only")
    p.add_argument("--json", type=Path, help="write every configuration's figures and events here")
    p.add_argument(
        "--share-truth",
        default="off",
        help="off, on or off,on: input sets shared between candidates (each N)",
    )
    p.add_argument("--summary", type=Path, help="write one compact object per configuration here (JSON)")
    p.add_argument(
        "--evals-per-gpu",
        default="",
        help="evaluations a GPU takes at once, e.g. 2,4 (each N>1 at each; default: the leases' own number)",
    )
    args = p.parse_args(argv)
    problem = load_problem(args.problem)
    gpus = [0] if problem.spec.device == "cuda" else None
    shared = cached_candidates(problem, args.candidates) if args.cached else []
    info = hardware(problem, gpus)
    rows: list[dict[str, Any]] = []
    summary_rows: list[dict[str, Any]] = []
    per_gpu: list[int | None] = [int(k) for k in args.evals_per_gpu.split(",") if k.strip()] or [None]
    configurations = [
        (mode, int(n), k)
        for mode in args.share_truth.split(",")
        for n in args.parallel.split(",")
        for k in (per_gpu if int(n) > 1 else per_gpu[:1])  # N=1 has one evaluation in flight at any number
    ]
    for mode, n, k in configurations:
        os.environ[SHARE_ENV] = "1" if mode == "on" else "0"
        codes = shared or candidates(problem, args.candidates, f"timeline-{time.time_ns()}-n{n}")
        row = {**measure(problem, n, codes, args.think, gpus, k), "share_truth": mode}
        rows.append(row)
        summary_rows.append(compact(row, rows, info))
        if args.summary:  # after each configuration: what finished is kept where a later one runs out of time
            args.summary.write_text(json.dumps(summary_rows, indent=1))
        print(
            f"N={n}, shared truth {mode}, {row['evals_per_gpu']} a GPU: {row['candidates']} candidates ({row['correct']} ok) in {row['wall_s']} s = {row['per_hour']}/h; "
            f"device exclusive {row['device_exclusive_pct']}%, shared only {row['device_shared_only_pct']}%, "
            f"idle {row['device_idle_pct']}%; truth servers busy {row['truth_busy_pct']}% "
            f"({row['truth_request_s']} s of requests); a candidate alive {row['candidate_alive_pct']}%; "
            f"after a warm-up of {WARM_UP_ROUNDS} evaluations a trajectory, not counted ({row['warm_up_s']} s)"
        )
        for kind, r in row["requests"].items():
            print(f"  {kind}: {r['count']} requests, {r['mean_s']} s each, queued {r['mean_queued_s']} s")
        print(f"  phases, mean s an evaluation: {phase_means(row['phases'])}")
        print(
            f"  timing leases overlapping: {row['timing_lease_overlaps']}; truth: {row['truth_sources']}; "
            f"host to the first launch (median): {row['first_launch_ms_median']} ms"
        )
        if row["device_memory_peak_mib"] is not None:
            print(f"  device memory in use, at most: {row['device_memory_peak_mib']} MiB")
        shift = speedup_shift(rows[0]["speedups"], row["speedups"]) if len(rows) > 1 else None
        if shift is not None:
            print(f"  speedups against N={rows[0]['parallel']}'s, the same kernels: x{shift:.3f} (median)")
        print(row["chart"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
