"""How a candidate worker is contained, and how everything it started is removed afterwards.

Preferred: a PID namespace (`unshare --pid --fork --kill-child --mount-proc`, needs root or user
namespaces). The worker is PID 1 of its own namespace: it cannot see or signal the harness, and when it
dies the kernel kills every process in the namespace, `setsid` sleepers included.

Fallback where `unshare` is refused: the worker's own session/process group is killed, then a sweep
kills any process still carrying the job's marker in its environment (a `setsid` child keeps it unless
it rebuilds its environment, which the static checks and the audit hook make hard but not impossible;
and there a candidate can signal the harness, as any process of the same user can).
`KERNEL_AGENT_ISOLATION=group` forces the fallback (tests exercise both).

With the PID namespace comes a network namespace (`--net`; the zygote's children: tools/worker/contain.py):
its only interface, `lo`, is down, so the candidate reaches nothing, not even listeners on the host's
loopback, whatever native code it runs (abstract unix sockets belong to the network namespace too), and an
IPC namespace (`--ipc`): System V shared memory, semaphores and message queues, and POSIX message queues,
of its own, so two candidates in flight at once cannot meet there; the worker itself, before it reports
ready, refuses itself the kernel's keyring calls (a seccomp filter, contain.block_keyrings: a uid's keyrings
are shared across all these namespaces). Its capabilities are then dropped (`setpriv`; no new privileges
on exec), so it cannot leave these namespaces again. Its filesystem is sealed in between (read-only
mounts, its own /dev, no other job's folder: tools/worker/seal.py), in its own mount namespace; nothing changes the host's
mount table or network. What contained a worker is what the parent itself sees in /proc (`observe`), never what the
worker says; every guard missing is said in the result as "uncontained: ..." (docs/exploits.md).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.worker import seal as sealing
from tools.worker.seal import SealSpec

MARKER_ENV = "KERNEL_AGENT_JOB"
PIDNS = "pid_namespace"
GROUP = "process_group"
NETNS = "net_namespace"
NO_CAPS = "no_capabilities"
READ_ONLY = "read_only_mounts"
DEVICES = "devices_hidden"
IPCNS = "ipc_namespace"
NO_KEYRINGS = "no_keyrings"
PRIVATE_JOBS = "private_jobs"
SEAL_GUARDS = (READ_ONLY, DEVICES, PRIVATE_JOBS)
UNCONTAINED = "uncontained"
_UNSHARE = ("--pid", "--fork", "--kill-child", "--mount-proc")
_NET = ("--net",)
_IPC = ("--ipc",)
_NO_CAPS = ("--no-new-privs", "--bounding-set=-all", "--inh-caps=-all")
SEAL_SCRIPT = Path(__file__).resolve().parents[1] / "worker" / "seal.py"


def _refusal(cmd: list[str]) -> str:
    """Why `cmd` (a probe that runs `true`) fails here, or "" where it works."""
    try:
        probe = subprocess.run([*cmd, "true"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return "" if probe.returncode == 0 else (probe.stderr.strip() or f"exit {probe.returncode}")[:200]


@dataclass(frozen=True)
class ColdSupport:
    """What the cold path's wrapper can do on this machine: "" where it works, else why not."""

    pidns: str
    netns: str
    no_caps: str
    ipcns: str = ""


@functools.cache
def cold_support() -> ColdSupport:
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if unshare is None:
        return ColdSupport(*["no unshare on PATH"] * 4)
    pidns = _refusal([unshare, *_UNSHARE])
    if pidns:
        return ColdSupport(*[pidns] + ["needs the PID namespace"] * 3)
    netns = _refusal([unshare, *_NET, *_UNSHARE])
    ipcns = _refusal([unshare, *_IPC, *_UNSHARE])
    spaces = [unshare, *(() if netns else _NET), *(() if ipcns else _IPC), *_UNSHARE]
    no_caps = _refusal([*spaces, setpriv, *_NO_CAPS]) if setpriv else "no setpriv on PATH"
    return ColdSupport(pidns, netns, no_caps, ipcns)


def _pidns_works() -> bool:
    return not cold_support().pidns


def mode() -> str:
    """Which containment is in force for candidate workers on this machine."""
    if os.environ.get("KERNEL_AGENT_ISOLATION") == GROUP:
        return GROUP
    return PIDNS if _pidns_works() else GROUP


def wrap(cmd: list[str], seal: SealSpec | None = None) -> list[str]:
    """The command line that runs `cmd` contained (unchanged in the fallback): its own PID and network
    namespaces, its filesystem sealed (`seal`: tools/worker/seal.py, in the mount namespace that comes with
    the PID namespace, while it still holds its capabilities), then no capabilities, as far as this machine
    allows (`observe` says what took)."""
    if mode() != PIDNS:
        return cmd
    support = cold_support()
    spaces = [
        shutil.which("unshare") or "unshare",
        *(() if support.netns else _NET),
        *(() if support.ipcns else _IPC),
        *_UNSHARE,
    ]
    sealing = [sys.executable, "-I", str(SEAL_SCRIPT), seal.to_json(), "--"] if seal else []
    no_caps = [] if support.no_caps else [shutil.which("setpriv") or "setpriv", *_NO_CAPS]
    return [*spaces, *sealing, *no_caps, *cmd]


def cold_refusals() -> dict[str, str]:
    """Why each guard is missing on the cold path, by what `observe` names it."""
    if mode() == GROUP and _pidns_works():
        forced = "KERNEL_AGENT_ISOLATION=group"
        return dict.fromkeys((PIDNS, NETNS, NO_CAPS, IPCNS, *SEAL_GUARDS), forced)
    support = cold_support()
    sealed = "needs the PID namespace" if support.pidns else ""
    return {
        PIDNS: support.pidns,
        NETNS: support.netns,
        NO_CAPS: support.no_caps,
        IPCNS: support.ipcns,
        **dict.fromkeys(SEAL_GUARDS, sealed),
    }


_GUARD_NAMES = {
    PIDNS: "pid",
    NETNS: "network",
    NO_CAPS: "capabilities",
    IPCNS: "ipc",
    NO_KEYRINGS: "keyrings",
}
_SEAL_NAMES = {READ_ONLY: "mounts", DEVICES: "devices", PRIVATE_JOBS: "jobs"}


def _namespace(pid: int | str, kind: str) -> int:
    return Path(f"/proc/{pid}/ns/{kind}").stat().st_ino


def _only_child(pid: int) -> int | None:
    """The one child of `pid` (the worker under `unshare --fork` or the zygote's PID-1 fork), if one."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(int(p.name)) == pid]
    return int(kids[0]) if len(kids) == 1 else None


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def _guards_seen(pid: int) -> set[str]:
    """The guards on process `pid`, as /proc shows them to this (trusted) process."""
    seen = set()
    if _namespace(pid, "pid") != _namespace("self", "pid"):
        seen.add(PIDNS)
    if _namespace(pid, "net") != _namespace("self", "net"):
        seen.add(NETNS)
    if _namespace(pid, "ipc") != _namespace("self", "ipc"):
        seen.add(IPCNS)
    status = _status(pid)
    if int(status.get("CapEff", "1"), 16) == int(status.get("CapPrm", "1"), 16) == 0:
        if status.get("NoNewPrivs", "0").strip() == "1":
            seen.add(NO_CAPS)
    if status.get("Seccomp", "0").strip() == "2":  # the worker's own filter (contain.block_keyrings), set
        seen.add(NO_KEYRINGS)  # before it reports ready; a filter cannot be removed, only added to
    return seen


def _filesystem_seen(pid: int, seal: SealSpec) -> tuple[set[str], dict[str, str]]:
    """The seal's guards on process `pid` as its mountinfo and its /dev show them, and why one is missing."""
    seen, why = set(), {}
    devices = sealing.unexpected_devices([p.name for p in Path(f"/proc/{pid}/root/dev").iterdir()])
    if devices:
        why[DEVICES] = f"/dev holds {_some(devices)}"
    else:
        seen.add(DEVICES)
    mounts = sealing.read_mounts(f"/proc/{pid}/mountinfo")
    writable = sealing.writable_mounts(mounts, seal)
    if writable:
        why[READ_ONLY] = f"writable: {_some(writable)}"
    else:
        seen.add(READ_ONLY)
    root = f"/proc/{pid}/root"
    uncovered, extras = sealing.private_uncovered(mounts, seal, root), sealing.private_view(seal, root)
    if uncovered:
        why[PRIVATE_JOBS] = f"not covered: {_some(uncovered)}"
    elif extras:
        why[PRIVATE_JOBS] = f"it sees {_some(extras)}"
    else:
        seen.add(PRIVATE_JOBS)
    return seen, why


def _some(items: list[str]) -> str:
    return ", ".join(items[:4]) + (" ..." if len(items) > 4 else "")


def observe(pid: int, nested: bool, refusals: dict[str, str], seal: SealSpec | None = None) -> list[str]:
    """What contains a live worker before its candidate's code runs: `pid`'s only child where `nested`,
    else `pid`. Each guard missing reads "uncontained: <guard> (why)", `refusals` giving the why. With
    `seal`, also whether its mounts are read-only but for what `seal` allows, and its /dev is hidden."""
    worker = _only_child(pid) if nested else pid
    try:
        if worker is None:
            raise OSError(f"process {pid} has no single child")
        seen = _guards_seen(worker)
        names = dict(_GUARD_NAMES)
        if seal is not None:
            fs_seen, fs_why = _filesystem_seen(worker, seal)
            seen |= fs_seen
            refusals = {**fs_why, **{k: v for k, v in refusals.items() if v}}
            names |= _SEAL_NAMES
    except (OSError, ValueError) as exc:
        return [f"{UNCONTAINED}: unverified (the worker could not be inspected: {exc})"]
    contained = [GROUP] if PIDNS not in seen else []
    for guard, name in names.items():
        why = refusals.get(guard) or "not seen on the worker"
        contained.append(guard if guard in seen else f"{UNCONTAINED}: {name} ({why})")
    return contained


def uncontained(containment: list[str]) -> list[str]:
    """The guards a worker ran without (empty where every guard held)."""
    return [c for c in containment if c.startswith(UNCONTAINED)]


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


def children_of(parent: int) -> set[int]:
    """The live processes whose parent is `parent`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == parent:
            found.add(int(entry.name))
    return found


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
