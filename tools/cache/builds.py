"""The build cache's shared entries: pins for the ones in use, last-use times, and a size cap with LRU eviction.

Layout under the build cache ($KERNEL_AGENT_CACHE/builds, the one folder a candidate's build may write):
`<name>-<key>/` (whole extensions), `.objects/<key>/` (compiled objects reused across builds), `.pch/<key>/`
(the harness's precompiled torch/extension.h), `.tmp/` (builds in progress; not entries). Every entry is
created in a private folder and renamed into place, so an entry either is complete or is absent.

An entry's last use is its folder's mtime, set on every hit. A process using an entry holds a shared
flock on `<entry>/.pin` (for a loaded extension: until the process exits); eviction takes that lock
exclusively without waiting, so an entry in use is skipped, and moves the entry aside before deleting it.
Stdlib only: the compiler shim imports this module on every compile.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

OBJECTS = ".objects"
PCH = ".pch"
PIN = ".pin"
DEFAULT_MAX_MB = 2048
# Kept open for the life of the process: a loaded extension stays pinned until the process exits.
_HELD: list[int] = []


def max_bytes() -> int:
    """The cap: $KERNEL_AGENT_CACHE_MAX_MB (default 2048; 0 or less turns eviction off)."""
    raw = os.environ.get("KERNEL_AGENT_CACHE_MAX_MB", "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return int(mb * 2**20)


def touch(entry: Path) -> None:
    """Record a use (the LRU clock)."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def _lock(entry: Path, mode: int) -> int | None:
    try:
        fd = os.open(entry / PIN, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:  # the entry is gone (evicted or never there)
        return None
    try:
        fcntl.flock(fd, mode)
    except OSError:
        os.close(fd)
        return None
    return fd


def pin(entry: Path, *, for_process: bool = False) -> int | None:
    """Hold a shared pin on `entry`; None if the entry is gone. `for_process` keeps it until exit."""
    fd = _lock(entry, fcntl.LOCK_SH)
    if fd is not None and not entry.is_dir():  # evicted between open and lock: the pin guards nothing
        os.close(fd)
        return None
    if fd is not None and for_process:
        _HELD.append(fd)
    return fd


@contextlib.contextmanager
def pinned(entry: Path) -> Iterator[bool]:
    """Pin `entry` for a block; yields whether it is there."""
    fd = pin(entry)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def publish(tmp: Path, final: Path) -> bool:
    """Rename a finished private folder into place; False (and tmp removed) if another process won."""
    try:
        tmp.rename(final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    touch(final)
    return True


@dataclass(frozen=True)
class Entry:
    path: Path
    last_use: float
    size: int


def _size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_blocks * 512
    return total


def entries(cache: Path) -> list[Entry]:
    """Every published entry of every kind (private `.tmp`-style folders are not entries)."""
    found = []
    for folder in (cache, cache / OBJECTS, cache / PCH):
        for path in folder.iterdir() if folder.is_dir() else []:
            if path.name.startswith(".") or not path.is_dir():
                continue
            with contextlib.suppress(OSError):
                found.append(Entry(path, path.stat().st_mtime, _size(path)))
    return found


def remove(entry: Path, cache: Path) -> bool:
    """Delete an entry nobody has pinned: take its pin exclusively without waiting, move it aside, delete."""
    fd = _lock(entry, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if fd is None:
        return False
    try:
        trash = cache / ".trash"
        trash.mkdir(exist_ok=True)
        try:
            entry.rename(trash / f"{entry.name}-{uuid.uuid4().hex[:8]}")
        except OSError:
            return False
    finally:
        os.close(fd)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def _sweep_stale_tmp(cache: Path, older_than_s: float = 3600) -> None:
    """Private folders of object and PCH builds whose process died (a build's own `.tmp` is swept by jobs)."""
    now = time.time()
    for folder in (cache / OBJECTS, cache / PCH):
        for path in folder.glob(".tmp-*") if folder.is_dir() else []:
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > older_than_s:
                    shutil.rmtree(path, ignore_errors=True)


def evict(cache: Path, limit: int | None = None, keep: frozenset[str] = frozenset()) -> list[Path]:
    """Remove least-recently used, unpinned entries until the cache fits `limit` bytes; returns what went.
    Entries named in `keep` stay (what the harness has just published for a worker that has exited).

    One evictor at a time (others skip: the running one does the work)."""
    limit = max_bytes() if limit is None else limit
    if limit <= 0 or not cache.is_dir():
        return []
    lock = os.open(cache / ".evict.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return []
        _sweep_stale_tmp(cache)
        found = sorted(entries(cache), key=lambda e: e.last_use)
        total = sum(e.size for e in found)
        removed = []
        for e in found:
            if total <= limit:
                break
            if e.path.name not in keep and remove(e.path, cache):
                total -= e.size
                removed.append(e.path)
        return removed
    finally:
        os.close(lock)
