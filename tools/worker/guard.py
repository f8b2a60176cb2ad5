"""A runtime guard for the candidate's process (`sys.addaudithook`, installed before its import).

It backs the static checks: Python-level file opens, subprocesses, sockets and signals are seen whatever
alias or indirection the source used. Native code (the candidate's C++, ctypes) is not audited: the PID
namespace, the network namespace with no route anywhere (sockets), the truth held by the parent and the
read-only harness snapshot are the real boundary; this guard turns the common Python routes into named,
disqualifying flags. An audit hook cannot be removed.

A violation is reported at once (the process may die right after) and then refused with PermissionError,
except signals, which are reported and let through: a candidate that kills its own group just crashes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Report = Callable[[str, str], None]

_SPAWN_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
}
_NET_EVENTS = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto"}
_SIGNAL_EVENTS = {"os.kill", "os.killpg", "signal.pthread_kill"}
# Events that change a path, by the positions of the paths they change (os.rename moves its source away too).
_PATH_CHANGES = {
    "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.chmod": (0,), "os.chown": (0,),
    "os.mkdir": (0,), "os.symlink": (1,), "os.link": (1,), "os.truncate": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,), "shutil.rmtree": (0,),
}  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
FLAG_FOR = {"file": "forbidden_file_access", "spawn": "forbidden_subprocess", "net": "forbidden_network",
            "signal": "signals_processes"}  # fmt: skip


def _is_write(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


class Guard:
    """The policy: writes (opens for writing, renames, removals, chmods, ...) only in the working dir (and the
    build cache during the harness's own build),
    no reads of the parent's private folder, subprocesses only during the harness's load_inline, no sockets."""

    def __init__(self, workdir: Path, secret: list[Path], build_cache: Path) -> None:
        self.workdir = os.path.realpath(workdir)
        self.secret = tuple(os.path.realpath(p) for p in secret)
        self.build_cache = os.path.realpath(build_cache)
        self.building = False  # set by tools.worker.build while the harness's load_inline runs
        self.report: Report = lambda kind, detail: None
        self.seen: set[tuple[str, str]] = set()
        self._busy = False

    def check(self, event: str, args: tuple[Any, ...]) -> str | None:
        """The violation kind for this event, or None."""
        if event == "open":
            return self._check_open(args)
        if event in _PATH_CHANGES:
            return self._check_change(args, _PATH_CHANGES[event])
        if event in _SPAWN_EVENTS and not self.building:
            return "spawn"
        if event in _NET_EVENTS:
            return "net"
        if event in _SIGNAL_EVENTS:
            return "signal"
        return None

    def _check_open(self, args: tuple[Any, ...]) -> str | None:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, str | bytes):
            return None  # an fd already open
        real = os.path.realpath(os.fsdecode(path))
        if _is_write(mode, flags):
            return None if self._writable(path) else "file"
        return "file" if _inside(real, self.secret) else None

    def _writable(self, path: str | bytes) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return _inside(real, (self.workdir, "/dev/null") + ((self.build_cache,) if self.building else ()))

    def _check_change(self, args: tuple[Any, ...], positions: tuple[int, ...]) -> str | None:
        """A rename, removal, chmod, ... is a write of the paths it changes (an fd's is not checked here)."""
        paths = [args[i] for i in positions if i < len(args) and isinstance(args[i], str | bytes)]
        return None if all(self._writable(p) for p in paths) else "file"

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self._busy:
            return
        kind = self.check(event, args)
        if kind is None:
            return
        self._busy = True  # reporting writes to the channel: no recursion
        try:
            detail = f"{event} {args[0]!r}"[:200] if args else event
            if (kind, detail) not in self.seen:
                self.seen.add((kind, detail))
                self.report(kind, detail)
        finally:
            self._busy = False
        if kind != "signal":
            raise PermissionError(f"kernel-agent sandbox: {event} is not allowed here ({FLAG_FOR[kind]})")


GUARD: Guard | None = None


def install(guard: Guard, report: Report) -> None:
    global GUARD
    guard.report = report
    GUARD = guard
    sys.addaudithook(guard.hook)


@contextlib.contextmanager
def building() -> Iterator[None]:
    """The harness's own build may spawn compilers and write to the build cache."""
    if GUARD is None:
        yield
        return
    previous, GUARD.building = GUARD.building, True
    try:
        yield
    finally:
        GUARD.building = previous
