"""Turns on the host between a distributed test run's workers (docs/testing.md, "Both cores"): a test marked
`serial` runs alone, every other test beside one other. Tests that read the host's clock or its load (a
CPU problem's timing, a busy-host check) would measure the other worker's builds instead of themselves.

A readers-writer lock on two files every worker opens: `flock` alone lets readers that keep arriving starve
a writer, so each taker passes a turnstile first and a writer holds it until the room is its own."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

TURNS_ENV = "KERNEL_AGENT_TEST_TURNS"  # the folder of the two lock files, made by the run's first process


@contextlib.contextmanager
def _locked(path: Path, how: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def host_turn(folder: Path, alone: bool) -> Iterator[None]:
    """Hold the host alone (`alone`) or beside other tests that do not, until the block ends."""
    turnstile, room = folder / "turnstile", folder / "room"
    if alone:
        with _locked(turnstile, fcntl.LOCK_EX), _locked(room, fcntl.LOCK_EX):
            yield
        return
    with _locked(turnstile, fcntl.LOCK_EX):
        pass  # a writer waiting holds the turnstile: no reader passes it until that writer is done
    with _locked(room, fcntl.LOCK_SH):
        yield
