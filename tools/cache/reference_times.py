"""Reference medians cached per problem (its reference's work), shape, host, device (a CPU problem's: its
timed threads) and torch version."""

from __future__ import annotations

import json
import platform
from typing import Any

from tools.cache import cache_root
from tools.host import timing_threads
from tools.problem import Problem, TimingShape
from tools.results import EnvInfo, TimingStats

# A cached reference median this unsteady (a loaded host, a few long samples) would set every later speedup:
# such an entry is not served, so the next evaluation times the reference again; nor is one timed while
# other processes kept the host busy (TimingStats.host_was_busy), however steady.
MAX_CACHED_REFERENCE_RSE = 0.2


def servable(stats: TimingStats | None) -> bool:
    return stats is not None and stats.rse <= MAX_CACHED_REFERENCE_RSE and not stats.host_was_busy


class ReferenceTimes:
    """Reference medians cached per problem, shape, host, device and torch version.

    The key leaves out the timing settings (`Problem.reference_hash`): the final re-check times candidates
    with twice the repetitions, and compares them against the same reference medians as the run did. The
    reference is a common denominator, so timing it again ranks nothing differently; on the H200 it cost
    55 s at the end of every run (a host-bound reference: 100 samples of 53 ms at 2 % spread)."""

    def __init__(self, problem: Problem, env: EnvInfo) -> None:
        self.path = cache_root() / "reference_times.json"
        # A CPU problem's reference is timed with its thread budget (tools.host.timing_threads) and a heap that
        # keeps freed memory (tools.supervise.cpu_env; medians from before it paid page faults): in its key.
        where = env.gpu or f"cpu, {timing_threads(problem)} threads, heap kept"
        self.prefix = f"{problem.reference_hash}|{platform.node()}|{where}|torch {env.torch}"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, shape: TimingShape) -> TimingStats | None:
        raw = self.data.get(f"{self.prefix}|{shape.name}")
        stats = TimingStats.model_validate(raw) if raw else None
        return stats if servable(stats) else None

    def put(self, shape: TimingShape, stats: TimingStats) -> None:
        current = json.loads(self.path.read_text()) if self.path.is_file() else {}
        current[f"{self.prefix}|{shape.name}"] = stats.model_dump()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(current, indent=1))
        tmp.replace(self.path)
        self.data = current
