"""Fork server for candidate workers: torch and the harness imported once, a fresh process per candidate.

The zygote never runs candidate code and never initialises CUDA (a CUDA context does not survive a
fork). Per candidate it forks; the child starts its own session, enters a new PID and mount namespace
where the machine allows (it is then PID 1 there and sees nothing of the zygote or the harness), takes
the candidate's working dir, environment and pipes (sent over the control socket), and runs
`tools.worker_candidate.main` as the cold path does. Why a zygote and not a reused CUDA worker:
tools/warm.py. Usage: python -m tools.zygote CONTROL_FD
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import select
import signal
import socket
import sys
import tempfile
import traceback
from typing import Any

import torch

from tools import worker_candidate

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG = 1
MAX_CONTROL = 1 << 20
EXIT_SETUP_FAILED = 70


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def die_with_parent() -> None:
    _check(_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def enter_pid_namespace() -> None:
    """Return in PID 1 of a new PID namespace with its own /proc; the process that called this waits for
    that PID 1 and exits as it did (what `unshare --pid --fork --kill-child --mount-proc` does)."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare(CLONE_NEWPID|CLONE_NEWNS)")
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    pid = os.fork()
    if pid:
        _mirror_exit(pid)
    die_with_parent()
    _check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc")


def _mirror_exit(pid: int) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _probe_pid_namespace() -> bool:
    """Whether a child of this process can enter its own PID namespace here."""
    pid = os.fork()
    if pid == 0:
        code = 1
        with contextlib.suppress(BaseException):
            enter_pid_namespace()
            code = 0 if os.getpid() == 1 else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _fresh_state(order: dict[str, Any]) -> None:
    """What a fork copies and must not share between candidates: random state and cached temp dirs."""
    worker_candidate.SET_ORDER.seed(os.urandom(16))
    random.seed(os.urandom(16))
    torch.seed()
    tempfile.tempdir = None
    os.environ.clear()
    os.environ.update(order["env"])
    os.chdir(order["cwd"])


def _child(sock: socket.socket, order: dict[str, Any], fds: list[int]) -> None:
    """The forked candidate worker; never returns."""
    code = EXIT_SETUP_FAILED
    try:
        sock.close()
        stdin_fd, out_fd, channel_fd = fds
        os.setsid()
        die_with_parent()
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(stdin_fd)
        os.close(out_fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - fd 0 is the candidate's pipe now
        if order["pidns"]:
            enter_pid_namespace()
        _fresh_state(order)
        code = _run_worker(order["request"], channel_fd)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _run_worker(request_path: str, channel_fd: int) -> int:
    try:
        return worker_candidate.main(request_path, str(channel_fd))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1


def _send(sock: socket.socket, **payload: Any) -> None:
    sock.send(json.dumps(payload).encode())


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _send(sock, event="exited", pid=pid, returncode=os.waitstatus_to_exitcode(status))


def _kill_all(children: set[int]) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def main(control_fd: str) -> int:
    """Fork a candidate worker per order (several may run at once: parallel compiles); report each exit.
    When the harness goes away (the socket closes), every child still running is killed."""
    sock = socket.socket(fileno=int(control_fd))
    if torch.cuda.is_initialized():  # a CUDA context does not survive a fork: never serve from one
        raise RuntimeError("the zygote initialised CUDA while importing the harness")
    pidns = _probe_pid_namespace()
    _send(sock, event="ready", pid=os.getpid(), pidns=pidns)
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02)
        if ready:
            raw, fds, _, _ = socket.recv_fds(sock, MAX_CONTROL, 3)
            if not raw:
                _kill_all(children)
                return 0
            order = json.loads(raw)
            order["pidns"] = bool(order.get("pidns")) and pidns
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(sock, order, fds)
            for fd in fds:
                os.close(fd)
            children.add(pid)
            _send(sock, event="spawned", pid=pid)
        _reap(sock, children)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
