"""Who may use a device, and how: shared (checks, truth, judging) or exclusive (a timed loop).

`SharedExclusiveLock` is a readers-writer lock that lets a waiting exclusive holder in before new shared
ones, so timings are not starved. Its holds are counters, not thread ownership: a hold taken by one
thread (a candidate's message reader, say) may be given back by another.

`DeviceTurns` is one evaluation's use of its device: it moves between shared, exclusive and nothing as the
evaluation goes (a candidate's correctness cases shared, its timing exclusive, the judge's re-check shared
again), and tells the listener set for the calling context (`exclusive_listener`) each exclusive span, so a
run's log can show that no two timed sections of one device overlapped.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from typing import Literal

from tools.supervise.timeline import tell

ExclusiveSink = Callable[[Literal["acquired", "released"], float], None]
"""Told each exclusive span: "acquired" with the seconds it waited, "released" with the seconds held."""

_SINK: contextvars.ContextVar[ExclusiveSink | None] = contextvars.ContextVar("exclusive_sink", default=None)


@contextlib.contextmanager
def exclusive_listener(sink: ExclusiveSink) -> Iterator[None]:
    """Within the block, evaluations started in this context tell `sink` their exclusive spans."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


class SharedExclusiveLock:
    """Many holders in shared mode or one in exclusive mode; a waiting exclusive holder goes first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting_exclusive = 0

    def acquire_shared(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting_exclusive)
            self._shared += 1

    def release_shared(self) -> None:
        with self._cond:
            self._shared -= 1
            self._cond.notify_all()

    def acquire_exclusive(self) -> None:
        with self._cond:
            self._waiting_exclusive += 1
            self._cond.wait_for(lambda: not self._exclusive and self._shared == 0)
            self._waiting_exclusive -= 1
            self._exclusive = True

    def release_exclusive(self) -> None:
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        self.acquire_exclusive()
        try:
            yield
        finally:
            self.release_exclusive()


Mode = Literal["none", "shared", "exclusive"]


def idle_mode(device: str) -> Mode:
    """What an evaluation holds of its device between its device work: nothing on a CUDA problem (its host
    work moves no device clock, so another trajectory's loop is timed meanwhile); shared on a CPU one (all
    its work runs on the device CPU loops are timed on)."""
    return "none" if device == "cuda" else "shared"


class DeviceTurns:
    """One evaluation's hold on `lock`: none, shared or exclusive, changed with `to` from any thread."""

    def __init__(self, lock: SharedExclusiveLock) -> None:
        self.lock = lock
        self.mode: Mode = "none"
        self._sink = _SINK.get()
        self._change = threading.Lock()
        self._held_since = 0.0
        self.name = f"{id(self):x}"  # which evaluation's turns, on the timeline `listen` hears

    def to(self, mode: Mode) -> None:
        with self._change:
            if mode == self.mode:
                return
            self._release()
            asked = time.monotonic()
            if mode == "shared":
                self.lock.acquire_shared()
            elif mode == "exclusive":
                self.lock.acquire_exclusive()
                self._held_since = time.monotonic()
                if self._sink is not None:
                    self._sink("acquired", self._held_since - asked)
            self.mode = mode
            if mode != "none":  # after the wait: when the hold began (bench/timeline.py)
                tell("device", mode, self.name)

    def _release(self) -> None:
        if self.mode != "none":
            tell("device", "none", self.name)
        if self.mode == "shared":
            self.lock.release_shared()
        elif self.mode == "exclusive":
            if self._sink is not None:
                self._sink("released", time.monotonic() - self._held_since)
            self.lock.release_exclusive()
        self.mode = "none"

    @contextlib.contextmanager
    def holding(self, mode: Mode) -> Iterator[None]:
        """`mode` within the block, then what was held before it."""
        before = self.mode
        self.to(mode)
        try:
            yield
        finally:
            self.to(before)

    def close(self) -> None:
        self.to("none")
