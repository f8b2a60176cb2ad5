"""Nsight Compute's CSV, read into one digest per kernel (`KernelProfile`).

Two pages feed it, both from one report (`ncu --import REPORT --csv --page details|raw --print-units base`):
the details page, one row per metric with its section's label (`Duration`, `Achieved Occupancy`, `Block
Limit Registers`) and the rules' hints; the raw page, one row per kernel with a column per metric by its
raw name (`smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio`), where the stall
reasons are. Either page alone gives what it has: every field is looked for under its details label and
its raw names, and a field neither has stays None. Units are scaled to microseconds and bytes whatever
ncu chose (`ns`, `usecond`, `Kbyte`), and thousands separators (`60,672`) are read as such.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from tools.profile_results import KernelProfile, StallReason

# Every field: its details-page label first, then raw names (ncu versions differ in a few).
FIELDS: dict[str, tuple[str, ...]] = {
    "duration": ("Duration", "gpu__time_duration.sum"),
    "sm_pct": ("Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_pct": ("Memory Throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_pct": (
        "DRAM Throughput",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "achieved": ("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    "theoretical": ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct"),
    "registers": ("Registers Per Thread", "launch__registers_per_thread"),
    "shared_static": ("Static Shared Memory Per Block", "launch__shared_mem_per_block_static"),
    "shared_dynamic": ("Dynamic Shared Memory Per Block", "launch__shared_mem_per_block_dynamic"),
}
# What caps the blocks an SM holds: the smallest of these is the occupancy's limiter.
LIMITS: dict[str, tuple[str, ...]] = {
    "registers": ("Block Limit Registers", "launch__occupancy_limit_registers"),
    "shared memory": ("Block Limit Shared Mem", "launch__occupancy_limit_shared_mem"),
    "warps per SM": ("Block Limit Warps", "launch__occupancy_limit_warps"),
    "blocks per SM": ("Block Limit SM", "launch__occupancy_limit_blocks"),
    "barriers": ("Block Limit Barriers", "launch__occupancy_limit_barriers"),
}
STALL_METRIC = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")
NOT_A_STALL = {"selected"}  # the warp issued: the cycle the others wait for
TOP_STALLS = 4
TIME_TO_US = {
    "ns": 1e-3,
    "nsecond": 1e-3,
    "us": 1.0,
    "usecond": 1.0,
    "ms": 1e3,
    "msecond": 1e3,
    "s": 1e6,
    "second": 1e6,
}
BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KiB": 1024, "MiB": 2**20, "KB": 1e3, "MB": 1e6}
ADVICE_TYPES = ("OPT", "WRN")
ADVICE_CHARS = 240
LAUNCH_COLUMNS = ("ID", "Kernel Name", "Block Size", "Grid Size")


@dataclass
class Launch:
    """One profiled kernel launch: its metrics by label and raw name, each (unit, value text)."""

    id: str
    name: str
    block: str = ""
    grid: str = ""
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)

    def number(self, names: Iterable[str]) -> float | None:
        """The first of `names` this launch has, as a number in base units (µs for time, bytes)."""
        for name in names:
            if name in self.metrics:
                unit, text = self.metrics[name]
                value = to_number(text)
                if value is None:
                    continue
                return value * TIME_TO_US.get(unit, 1.0) * BYTES.get(unit, 1)
        return None


def to_number(text: str) -> float | None:
    cleaned = text.strip().replace(",", "")
    try:
        return float(cleaned)
    except ValueError:
        return None


def csv_rows(text: str) -> list[dict[str, str]]:
    """The CSV part of ncu's output (it may follow its `==PROF==` lines), as rows by column name."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    body = [line for line in lines[start:] if line.startswith('"')]
    return list(csv.DictReader(body))


def shorten(rule: str) -> str:
    text = " ".join(rule.split())
    return text if len(text) <= ADVICE_CHARS else text[: ADVICE_CHARS - 1].rstrip() + "…"


def tool_note(row: dict[str, str]) -> bool:
    """A rule's remark about ncu's own collection (a metric it could not find), not about the kernel."""
    return "could not be found" in (row.get("Rule Description") or "")


def read_details(rows: list[dict[str, str]], launches: dict[str, Launch]) -> None:
    for row in rows:
        launch = launches.setdefault(row["ID"], new_launch(row))
        if row.get("Metric Name"):
            launch.metrics[row["Metric Name"]] = (row.get("Metric Unit") or "", row.get("Metric Value") or "")
        elif row.get("Rule Type") in ADVICE_TYPES and row.get("Rule Description") and not tool_note(row):
            gain = to_number(row.get("Estimated Speedup") or "")
            said = shorten(row["Rule Description"])
            launch.advice.append(f"{said} (ncu estimates up to {gain:.0f}% faster)" if gain else said)


def read_raw(rows: list[dict[str, str]], launches: dict[str, Launch]) -> None:
    """The raw page: its first row after the header holds the units (its ID cell is empty)."""
    units = rows[0] if rows and not rows[0].get("ID") else {}
    for row in rows:
        if not row.get("ID"):
            continue
        launch = launches.setdefault(row["ID"], new_launch(row))
        for name, value in row.items():
            if name and name not in LAUNCH_COLUMNS and value is not None:
                launch.metrics.setdefault(name, (units.get(name) or "", value))


def new_launch(row: dict[str, str]) -> Launch:
    return Launch(
        id=row["ID"],
        name=row.get("Kernel Name", ""),
        block=row.get("Block Size", ""),
        grid=row.get("Grid Size", ""),
    )


def parse_launches(*pages: str) -> list[Launch]:
    """Every launch the pages (details and/or raw CSV text) describe, merged by launch ID, in order."""
    launches: dict[str, Launch] = {}
    for text in pages:
        rows = csv_rows(text)
        if rows and "Metric Name" in rows[0]:
            read_details(rows, launches)
        else:
            read_raw(rows, launches)
    return list(launches.values())


def stalls_of(launch: Launch) -> list[StallReason]:
    found = {}
    for name, (_unit, text) in launch.metrics.items():
        match = STALL_METRIC.match(name)
        value = to_number(text)
        if match and value is not None and match.group(1) not in NOT_A_STALL:
            found[match.group(1)] = value
    total = sum(found.values()) or 1.0
    top = sorted(found.items(), key=lambda kv: -kv[1])[:TOP_STALLS]
    return [StallReason(reason=r, cycles_per_issue=v, share=v / total) for r, v in top if v > 0]


def limiter_of(launch: Launch) -> tuple[str, float | None]:
    limits = {what: launch.number(names) for what, names in LIMITS.items()}
    known = {what: v for what, v in limits.items() if v is not None}
    if not known:
        return "", None
    least = min(known.values())
    return " and ".join(w for w, v in known.items() if v == least), least


def _int(value: float | None) -> int | None:
    return int(value) if value is not None else None


def digest(launch: Launch, kind: str) -> KernelProfile:
    """One launch's digest; `kind`: own, gemm, elementwise, ... (the caller knows the candidate's names)."""
    limiter, blocks = limiter_of(launch)
    static, dynamic = launch.number(FIELDS["shared_static"]), launch.number(FIELDS["shared_dynamic"])
    shared = None if static is None and dynamic is None else int((static or 0) + (dynamic or 0))
    return KernelProfile(
        name=launch.name,
        kind=kind,
        duration_us=launch.number(FIELDS["duration"]),
        sm_pct=launch.number(FIELDS["sm_pct"]),
        memory_pct=launch.number(FIELDS["memory_pct"]),
        dram_pct=launch.number(FIELDS["dram_pct"]),
        achieved_occupancy_pct=launch.number(FIELDS["achieved"]),
        theoretical_occupancy_pct=launch.number(FIELDS["theoretical"]),
        occupancy_limiter=limiter,
        blocks_per_sm=blocks,
        registers=_int(launch.number(FIELDS["registers"])),
        shared_bytes=shared,
        grid=launch.grid,
        block=launch.block,
        stalls=stalls_of(launch),
        advice=launch.advice,
    )


def _weighted(values: list[tuple[float | None, float]]) -> float | None:
    known = [(v, w) for v, w in values if v is not None]
    weight = sum(w for _, w in known)
    if not known:
        return None
    return sum(v * w for v, w in known) / weight if weight else known[0][0]


def merged_stalls(group: list[KernelProfile], weights: list[float]) -> list[StallReason]:
    """The launches' stall reasons, each weighted by its launch's duration."""
    reasons = {s.reason for p in group for s in p.stalls}
    cycles = {
        r: _weighted(
            [
                (next((s.cycles_per_issue for s in p.stalls if s.reason == r), 0.0), w)
                for p, w in zip(group, weights, strict=True)
            ]
        )
        or 0.0
        for r in reasons
    }
    total = sum(cycles.values()) or 1.0
    top = sorted(cycles.items(), key=lambda kv: -kv[1])[:TOP_STALLS]
    return [StallReason(reason=r, cycles_per_issue=v, share=v / total) for r, v in top]


def merge_by_name(profiles: list[KernelProfile]) -> list[KernelProfile]:
    """Launches of one kernel as one digest: durations added, rates weighted by duration; costliest first."""
    groups: dict[str, list[KernelProfile]] = {}
    for p in profiles:
        groups.setdefault(p.name, []).append(p)
    merged = []
    for group in groups.values():
        first = group[0]
        weights = [p.duration_us or 0.0 for p in group]
        update: dict[str, object] = {"launches": len(group)}
        if len(group) > 1:
            update["duration_us"] = sum(weights) if any(p.duration_us is not None for p in group) else None
            for name in ("sm_pct", "memory_pct", "dram_pct", "achieved_occupancy_pct"):
                update[name] = _weighted([(getattr(p, name), w) for p, w in zip(group, weights, strict=True)])
            update["stalls"] = merged_stalls(group, weights)
        merged.append(first.model_copy(update=update))
    return sorted(merged, key=lambda p: -(p.duration_us or 0.0))
