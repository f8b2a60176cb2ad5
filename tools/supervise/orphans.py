"""Warm pools a killed harness left behind: found by their lock, removed by the next pool.

A pool's folder on tmpfs holds hundreds of MB of jobs. `close` removes it, but a harness killed with
SIGKILL (a CI timeout, an OOM kill, a user's `kill -9`) never runs it, and tmpfs is memory. Each pool
holds an exclusive `flock` on a file in its folder for its life; the kernel drops the lock when the
process dies, however it dies. A new pool removes every sibling whose lock it can take. A lock, not the
pid in the folder's name, because a pid is reused and means nothing across PID namespaces that share
/dev/shm; the pid rule stays only for folders made before the lock existed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "kagent-warm-"
ALIVE = ".alive"  # the file each live pool holds locked


def new_pool_folder(parent: Path) -> tuple[Path, int]:
    """This process's pool folder under `parent`, made after removing what killed harnesses left there, and
    the descriptor that holds it alive (close it when the folder goes)."""
    sweep_orphans(parent)
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    return root, hold_alive(root)


def hold_alive(root: Path) -> int:
    """Lock `root`'s alive file for this process's life; the descriptor is close-on-exec, so no worker
    started from here keeps the lock after this process is gone."""
    fd = os.open(root / ALIVE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def sweep_orphans(parent: Path) -> list[Path]:
    """Remove the pools under `parent` that no live process holds; returns what was removed."""
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for folder in parent.glob(f"{PREFIX}*"):
            if folder.is_dir() and not folder.is_symlink() and _owned(folder) and _orphaned(folder):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    return removed


def _owned(folder: Path) -> bool:
    try:
        return folder.stat().st_uid == os.getuid()
    except OSError:
        return False


def _orphaned(folder: Path) -> bool:
    try:
        fd = os.open(folder / ALIVE, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return _maker_gone(folder)  # made before the lock, or a pool still being made (its maker lives)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its pool is alive
    finally:
        os.close(fd)
    return True


def _maker_gone(folder: Path) -> bool:
    pid = folder.name[len(PREFIX) :].split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
