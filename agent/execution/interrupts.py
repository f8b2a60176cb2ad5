"""Waiting on worker threads so that a Ctrl-C is seen, and seen whole.

Python raises KeyboardInterrupt in the main thread between any two bytecodes, threading's own lock code
included: raised inside `Condition.wait` just after it released its lock, the `with` around it releases
the lock again and the interrupt becomes `RuntimeError: release unlocked lock`. A suite's Ctrl-C ended
that way on CI (exit 1, and its runs went on to the end). So while the main thread waits on threads,
SIGINT only sets a flag, and the wait polls it.
"""

from __future__ import annotations

import concurrent.futures as cf
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

KILL_EVERY_S = 1.0


class CtrlC:
    """Whether SIGINT came while `ctrl_c_as_flag` was in force."""

    def __init__(self) -> None:
        self.pressed = False

    def press(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True  # no lock: a signal handler that waits on one can deadlock the main thread


@contextmanager
def ctrl_c_as_flag() -> Iterator[CtrlC]:
    """Inside, SIGINT sets `.pressed` instead of raising. Left alone off the main thread (a run inside a
    suite's worker, where no KeyboardInterrupt arrives anyway) and where SIGINT is ignored (a `nohup` or
    background job: it must stay deaf to it) or handled outside Python."""
    ctrl_c = CtrlC()
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous in (signal.SIG_IGN, None):
        yield ctrl_c
        return
    signal.signal(signal.SIGINT, ctrl_c.press)
    try:
        yield ctrl_c
    finally:
        signal.signal(signal.SIGINT, previous)


def wait_or_stop(
    futures: Sequence[cf.Future[Any]],
    ctrl_c: CtrlC,
    stop: Callable[[], None],
    kill: Callable[[], None],
    poll_s: float = 0.2,
) -> bool:
    """Waits until every future is done. On Ctrl-C calls `stop` once, then `kill` every second until all
    are done (what a thread starts after the stop is killed too). Returns whether Ctrl-C came."""
    stopped = False
    last_kill = 0.0
    while not all(f.done() for f in futures):
        if ctrl_c.pressed and not stopped:
            stopped = True
            stop()
        if stopped and time.monotonic() - last_kill >= KILL_EVERY_S:
            kill()
            last_kill = time.monotonic()
        cf.wait(futures, timeout=poll_s)
    if ctrl_c.pressed and not stopped:  # pressed as the last one ended: still a stop, as the user asked
        stopped = True
        stop()
    return stopped


def raised_by_ctrl_c(exc: BaseException) -> bool:
    """Whether `exc` was raised while a KeyboardInterrupt was being handled: the interrupt landing inside
    threading's lock code turns into `RuntimeError: release unlocked lock` (its context the interrupt). Where
    the main thread works rather than waits (a single run), the user's Ctrl-C is still an interrupt then."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__context__
    return False
