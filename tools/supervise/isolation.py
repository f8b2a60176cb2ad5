"""How a candidate worker is contained, and how everything it started is removed afterwards.

Preferred: a PID namespace (`unshare --pid --fork --kill-child --mount-proc`, needs root or user
namespaces). The worker is PID 1 of its own namespace: it cannot see or signal the harness, and when it
dies the kernel kills every process in the namespace, `setsid` sleepers included.

Fallback where `unshare` is refused: the worker's own session/process group is killed, then a sweep
kills any process still carrying the job's marker in its environment (a `setsid` child keeps it unless
it rebuilds its environment, which the static checks and the audit hook make hard but not impossible;
and there a candidate can signal the harness, as any process of the same user can).
`KERNEL_AGENT_ISOLATION=group` forces the fallback (tests exercise both).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
from pathlib import Path

MARKER_ENV = "KERNEL_AGENT_JOB"
PIDNS = "pid_namespace"
GROUP = "process_group"
_UNSHARE = ("--pid", "--fork", "--kill-child", "--mount-proc")


@functools.cache
def _pidns_works() -> bool:
    exe = shutil.which("unshare")
    if exe is None:
        return False
    try:
        probe = subprocess.run([exe, *_UNSHARE, "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def mode() -> str:
    """Which containment is in force for candidate workers on this machine."""
    if os.environ.get("KERNEL_AGENT_ISOLATION") == GROUP:
        return GROUP
    return PIDNS if _pidns_works() else GROUP


def wrap(cmd: list[str]) -> list[str]:
    """The command line that runs `cmd` contained (unchanged in the fallback)."""
    if mode() != PIDNS:
        return cmd
    return [shutil.which("unshare") or "unshare", *_UNSHARE, *cmd]


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def marked_processes(token: str, exclude: set[int] | None = None) -> list[int]:
    """Live processes whose environment carries this marker (the harness itself never does)."""
    needle = f"{MARKER_ENV}={token}\0".encode()
    skip = {os.getpid(), *(exclude or ())}
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) not in skip]
    return [pid for pid in pids if _environ_has(pid, needle)]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descends_from(pid: int, ancestors: set[int]) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        pid = _parent(pid) or 0
        if pid in ancestors:
            return True
        seen += 1
    return False


def sweep(token: str, exclude: set[int] | None = None, spare_trees: set[int] | None = None) -> list[int]:
    """Kill what is left of a job (its marker in the environment); returns the pids it killed.

    A warm zygote's children all carry the zygote's marker: `exclude` spares the zygote itself and
    `spare_trees` the process trees of other candidates it forked that are still running."""
    killed = []
    for pid in marked_processes(token, exclude):
        if spare_trees and (pid in spare_trees or _descends_from(pid, spare_trees)):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed
