"""What a timing test compares and what its failure should say: a result's primary loops, and the host it
ran on (CI machines differ from ours: their CPUs may share cores, their neighbours may steal time, and a
speedup that moved is read against that)."""

from __future__ import annotations

import os
from pathlib import Path

from tools.results import BenchResult


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def steal_share() -> str:
    """The share of all CPU time since boot that the hypervisor gave to others (/proc/stat's steal)."""
    fields = _read("/proc/stat").splitlines()[0].split()[1:]
    if len(fields) < 8:
        return "?"
    ticks = [int(v) for v in fields]
    return f"{ticks[7] / max(1, sum(ticks)):.1%}"


def describe_host() -> str:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    siblings = {_read(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") for c in cpus}
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if "model name" in line
        ),
        "?",
    )
    return (
        f"host: {len(cpus)} CPUs ({model}; cores' thread siblings {sorted(siblings)}), "
        f"load {os.getloadavg()}, steal since boot {steal_share()}"
    )


def intervals_meet(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def describe_timing(result: BenchResult) -> str:
    """Both loops of the primary shape, the paired check, and what the evaluation said."""
    t = result.primary_timing
    if t is None or t.candidate is None or t.reference is None:
        return f"{result.speedup}x, no primary timing; {result.notices}"
    check = t.reference_check.median_ms if t.reference_check else None
    return (
        f"{t.speedup:.2f}x {t.speedup_interval}: candidate {t.candidate.median_ms:.1f} ms (RSE {t.candidate.rse:.1%}, "
        f"n {t.candidate.n}, busy {t.candidate.busy_elsewhere}), reference {t.reference.median_ms:.1f} ms "
        f"({'cached' if t.reference_cached else 'timed now'}, RSE {t.reference.rse:.1%}, busy "
        f"{t.reference.busy_elsewhere}, check {check}); {result.notices}"
    )
