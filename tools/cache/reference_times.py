"""Reference medians cached per problem (its reference's work), shape, host, device (a CPU problem's: its
timed threads) and torch version."""

from __future__ import annotations

import fcntl
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

from tools.cache import cache_root
from tools.host import timing_threads
from tools.problem import Problem, TimingShape
from tools.results import EnvInfo, LaunchFreeReference, TimingStats

# A cached reference median this unsteady (a loaded host, a few long samples) would set every later speedup:
# such an entry is not served, so the next evaluation times the reference again; nor is one timed while
# other processes kept the host busy (TimingStats.host_was_busy), however steady.
MAX_CACHED_REFERENCE_RSE = 0.2
# The reference's medians at the primary shape by a device's clock, from quiet loops and checks: the last
# this many are kept, and the paired check pools them (tools/judge/_paired.py `pooled`).
WINDOWS = 9


def servable(stats: TimingStats | None) -> bool:
    return stats is not None and stats.rse <= MAX_CACHED_REFERENCE_RSE and not stats.host_was_busy


def is_window(stats: TimingStats) -> bool:
    """Whether a reference loop is one of its windows: timed by a device's clock, steadily, on a quiet host
    (a host-clock loop pairs with its own candidate instead)."""
    return stats.clock == "cuda_event" and servable(stats)


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
        # A GPU's medians since each call's launches are queued behind a hold (tools/worker/hold.py): in its key.
        where = (
            f"{env.gpu}, launches held" if env.gpu else f"cpu, {timing_threads(problem)} threads, heap kept"
        )
        self.prefix = f"{problem.reference_hash}|{platform.node()}|{where}|torch {env.torch}"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, shape: TimingShape) -> TimingStats | None:
        raw = self.data.get(f"{self.prefix}|{shape.name}")
        stats = TimingStats.model_validate(raw) if raw else None
        return stats if servable(stats) else None

    def put(self, shape: TimingShape, stats: TimingStats) -> None:
        self._write({f"{self.prefix}|{shape.name}": lambda _old: stats.model_dump()})

    def launch_free(self, shape: TimingShape) -> LaunchFreeReference | None:
        """The reference's launch-free timing at `shape` (tools/worker/launch_free.py), keyed apart from the eager
        median: a graph's replays, or why the reference could not be replayed (not tried again)."""
        raw = self.data.get(f"{self.prefix}|{shape.name}|launch_free")
        return LaunchFreeReference.model_validate({**raw, "cached": True}) if raw else None

    def put_launch_free(self, shape: TimingShape, found: LaunchFreeReference) -> None:
        """Kept where it is steady and quiet (`servable`), or where capture was refused (said once, kept; not
        where an earlier failure in the same worker stopped it being tried)."""
        if found.mode == "graph" and not servable(found.stats) or "earlier capture" in found.note:
            return
        self._write(
            {f"{self.prefix}|{shape.name}|launch_free": lambda _old: found.model_dump(exclude={"cached"})}
        )

    def windows(self, shape: TimingShape) -> list[float]:
        """The medians of the reference's last quiet windows at `shape` by a device's clock, oldest first."""
        raw = self.data.get(f"{self.prefix}|{shape.name}|windows")
        return [float(v) for v in raw] if isinstance(raw, list) else []

    def newest_window_age(self, shape: TimingShape) -> float | None:
        """Seconds since the newest window at `shape` was kept (by this host's wall clock), None where none
        was or its time was not kept (a cache from before the time was)."""
        at = self.data.get(f"{self.prefix}|{shape.name}|windows_at")
        return max(0.0, time.time() - float(at)) if isinstance(at, int | float) else None

    def add_window(self, shape: TimingShape, stats: TimingStats) -> list[float]:
        """`stats`' median as the newest window where it is one (`is_window`), and when it was kept; the
        windows kept, oldest first."""
        if not is_window(stats):
            return self.windows(shape)

        def appended(old: Any) -> list[float]:
            return [*(old if isinstance(old, list) else []), stats.median_ms][-WINDOWS:]

        key = f"{self.prefix}|{shape.name}|windows"
        self._write({key: appended, f"{key}_at": lambda _old: time.time()})
        return self.windows(shape)

    def _write(self, updates: dict[str, Callable[[Any], Any]]) -> None:
        """Each entry `key` of `updates` set to `update(its value now)`, read again from the file under a lock (the
        trajectories of a parallel run, in threads or processes, write it too: every check adds a window),
        and the file replaced whole through a temporary file of this writer's own."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = json.loads(self.path.read_text()) if self.path.is_file() else {}
            for key, update in updates.items():
                current[key] = update(current.get(key))
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(current, indent=1))
            tmp.replace(self.path)
        self.data = current
