"""What a timing test's failure should say of the host it ran on: CI machines differ from ours (their CPUs
may share cores, their neighbours may steal time), and a speedup that moved is read against that."""

from __future__ import annotations

import os
from pathlib import Path


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
