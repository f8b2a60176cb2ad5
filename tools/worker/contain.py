"""What a candidate worker forked by the zygote does to contain itself before any candidate code runs: a
network namespace of its own (abstract unix sockets live there too) and an IPC namespace of its own (System V
shared memory, semaphores, message queues and POSIX message queues: nothing another candidate made), then (once the zygote has sealed its filesystem: tools/worker/seal.py) no
capabilities (the cold path's `unshare --net` and `setpriv` do the same, tools/supervise/isolation.py).

A new network namespace has one interface, `lo`, and it is down: no route anywhere, not even to listeners
on the host's loopback. Nothing here touches the host's network configuration. With no
capabilities and no new privileges on exec, neither the candidate nor a program it runs can `setns` or
`unshare` its way out. The harness does not take the worker's word for any of this: it reads the worker's
namespaces and capabilities in /proc (isolation.observe).
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Callable

from pydantic import TypeAdapter

CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
CAPABILITY_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
LAST_CAP_FILE = "/proc/sys/kernel/cap_last_cap"


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter_net_namespace() -> None:
    """From now on this process (and what it forks) is in a new network namespace: only `lo`, down."""
    check(libc().unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")


def enter_ipc_namespace() -> None:
    """From now on this process (and what it forks) has System V IPC and POSIX message queues of its own."""
    check(libc().unshare(CLONE_NEWIPC), "unshare(CLONE_NEWIPC)")


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW = 1, 1 << 2  # seccomp(2)'s operation and flag
_SECCOMP_CALL = {"x86_64": 317, "aarch64": 277}  # __NR_seccomp
_LD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
_X32 = 0x40000000  # x86_64's x32 calls carry this bit in their number: refused like the keyring calls
# add_key, request_key, keyctl by the audit arch this interpreter runs as
_KEYRING_CALLS = {"x86_64": (0xC000003E, (248, 249, 250)), "aarch64": (0xC00000B7, (217, 218, 219))}


def block_keyrings(allow_speculation: bool = True) -> None:
    """No kernel keyring calls from now on, in this process and all it starts (a seccomp filter: EPERM).
    The user keyring of a uid is shared across PID, network, IPC and mount namespaces: two candidates of one
    user could pass data there (`add_key` in one, `request_key` and `keyctl read` in the other). Calls of
    another ABI than this one's (i386's `int 0x80`) are refused too, so none goes round the filter.
    `allow_speculation=False` installs it through prctl, as the worker did before (bench/launch_probe.py)."""
    if os.uname().machine not in _KEYRING_CALLS:
        raise OSError(0, f"no keyring filter for {os.uname().machine}")
    arch, (add_key, request_key, keyctl) = _KEYRING_CALLS[os.uname().machine]
    program = [
        (_LD, 0, 0, 4),  # seccomp_data.arch
        (_JEQ, 1, 0, arch),
        (_RET, 0, 0, _EPERM),
        (_LD, 0, 0, 0),  # seccomp_data.nr
        (_JGE, 4, 0, _X32),
        (_JEQ, 3, 0, add_key),
        (_JEQ, 2, 0, request_key),
        (_JEQ, 1, 0, keyctl),
        (_RET, 0, 0, _ALLOW),
        (_RET, 0, 0, _EPERM),
    ]
    filters = (_SockFilter * len(program))(*(_SockFilter(*op) for op in program))
    fprog = _SockFprog(len(program), filters)
    c = libc()
    check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")  # what a filter needs
    if allow_speculation and install_filter_allowing_speculation(c, fprog):
        return
    check(c.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp(keyrings)")


def install_filter_allowing_speculation(c: ctypes.CDLL, fprog: _SockFprog) -> bool:
    """The filter through seccomp(2) with SECCOMP_FILTER_FLAG_SPEC_ALLOW: whether it is installed. Without the
    flag, a kernel whose speculation policy is `seccomp` (x86's default until Linux's 2f46993d made it `prctl`:
    older and some vendor kernels still have it) turns mitigations on for every filtered process
    (`Speculation_Store_Bypass: thread force mitigated` in /proc/PID/status), which slows its host code, and the
    timed call's host issue time is part of its figure. They would protect this process's memory from
    speculation by code in it: the candidate, which can read that memory anyway. False where the call failed
    (a kernel without it or the flag: ENOSYS, EINVAL): the caller then installs the filter through prctl,
    which raises if that fails too."""
    number = _SECCOMP_CALL.get(os.uname().machine)
    if number is None:
        return False
    rc: int = c.syscall(number, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, ctypes.byref(fprog))
    return rc == 0


def _last_cap() -> int:
    try:
        with open(LAST_CAP_FILE) as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 63


def drop_capabilities() -> None:
    """No capabilities now or after any exec: the bounding and ambient sets emptied (while CAP_SETPCAP is
    still held), then the effective, permitted and inheritable sets, then no new privileges."""
    c = libc()
    if _has_capabilities():
        for cap in range(_last_cap() + 1):
            check(c.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"prctl(PR_CAPBSET_DROP, {cap})")
        check(c.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(PR_CAP_AMBIENT)")
        header, empty = _CapHeader(CAPABILITY_VERSION_3, 0), (_CapData * 2)()
        check(c.capset(ctypes.byref(header), empty), "capset(empty)")
    check(c.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _has_capabilities() -> bool:
    """Whether this process holds any capability at all (an unprivileged one has none to drop)."""
    with open("/proc/self/status") as fh:
        fields = dict(line.split(":\t", 1) for line in fh if ":\t" in line)
    return any(int(fields.get(k, "0"), 16) for k in ("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"))


def attempt(step: Callable[[], None]) -> str:
    """Run one containment step: "" where it took, else why not. A refused step does not stop the
    evaluation: the harness, which reads the worker's state in /proc, says in the result what was missing."""
    try:
        step()
    except OSError as exc:
        return str(exc)
    return ""


PROBED = ("netns", "ipcns", "no_caps")
_PROBED: TypeAdapter[dict[str, str]] = TypeAdapter(dict[str, str])  # the probe child's report


def probe() -> dict[str, str]:
    """Whether a child of this process can enter its own network and IPC namespaces and drop its
    capabilities: for each, "" where it can, else why not. Run in a throwaway fork (it keeps what it
    entered)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        found = dict.fromkeys(PROBED, "probe died")
        try:
            found = {
                "netns": attempt(enter_net_namespace),
                "ipcns": attempt(enter_ipc_namespace),
                "no_caps": attempt(drop_capabilities),
            }
        finally:
            os.write(write_fd, json.dumps(found).encode())
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        raw = pipe.read()
    os.waitpid(pid, 0)
    try:
        return _PROBED.validate_json(raw)
    except ValueError:  # pydantic's ValidationError is one
        return dict.fromkeys(PROBED, "probe died")
