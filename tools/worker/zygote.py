"""Fork server for candidate workers: torch and the harness imported once, a fresh process per candidate.

The zygote never runs candidate code and never touches the CUDA driver. Not initialising CUDA is not
enough: in torch, any device query that reaches the driver (`torch.cuda.is_available()` and
`device_count()` by default, and `torch.utils.cpp_extension` asks the first at import) marks every later
fork "bad", and CUDA then refuses to start in the child while `torch.cuda.is_initialized()` stays false.
So the zygote asks through NVML (`PYTORCH_NVML_BASED_CUDA_CHECK=1`, set before torch is imported), keeps
the runtime's device count out of reach while it imports the harness (where NVML cannot answer, torch
would fall back to it), and, before it serves, forks a probe that checks the real condition: the child is not in a bad fork and, where
a GPU is visible, creates a CUDA context. The result travels in its `ready` report; where CUDA cannot
start in its children, the evaluator runs CUDA candidates cold (tools/supervise/pool.py). Per candidate it forks; the child starts its own session, enters a new PID and mount namespace
where the machine allows (it is then PID 1 there and sees nothing of the zygote or the harness), takes
the candidate's working dir, environment and pipes (sent over the control socket), and runs
`tools.worker.candidate.main` as the cold path does. Before that, where the harness asks (its PID-namespace
mode), it enters network and IPC namespaces of its own and, once in its PID namespace, drops every capability
(tools/worker/contain.py); the harness checks both in /proc. Why a zygote and not a reused CUDA worker:
tools/supervise/pool.py. Usage: python -m tools.worker.zygote CONTROL_FD
"""

from __future__ import annotations

import contextlib
import os

# Before torch is imported: device queries through NVML, which never poisons a fork (see above).
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"

import random
import select
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tools import orders, wire
from tools.worker import contain, seal

# tools.worker.candidate and tools.worker.usage, imported by `import_harness` without a driver query
worker_candidate: Any = None
worker_repeats: Any = None
worker_usage: Any = None

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_SET_PDEATHSIG = 1
MAX_CONTROL = 1 << 20
EXIT_SETUP_FAILED = 70


def die_with_parent() -> None:
    contain.check(contain.libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def enter_pid_namespace() -> None:
    """Return in PID 1 of a new PID namespace with its own /proc; the process that called this waits for
    that PID 1 and exits as it did (what `unshare --pid --fork --kill-child --mount-proc` does)."""
    libc = contain.libc()
    contain.check(libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare(CLONE_NEWPID|CLONE_NEWNS)")
    contain.check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    pid = os.fork()
    if pid:
        _mirror_exit(pid)
    die_with_parent()
    contain.check(
        libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mount /proc"
    )


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


@contextlib.contextmanager
def _no_driver_queries() -> Iterator[None]:
    """While the harness is imported, the CUDA runtime's device count answers 0 without reaching the driver:
    `torch.utils.cpp_extension` asks `torch.cuda.is_available()` at import only to word a warning."""
    real = getattr(torch._C, "_cuda_getDeviceCount", None)
    if real is None:  # a CPU build of torch: no driver to reach
        yield
        return
    torch._C._cuda_getDeviceCount = lambda: 0
    try:
        yield
    finally:
        torch._C._cuda_getDeviceCount = real


def import_harness() -> None:
    global worker_candidate, worker_repeats, worker_usage
    with _no_driver_queries():
        from tools.worker import candidate, repeats, usage
    worker_candidate, worker_repeats, worker_usage = candidate, repeats, usage


def _probe_cuda_fork() -> str:
    """Whether CUDA starts in a child forked from this process: "ok", "no_gpu", or why not."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        verdict = "error"
        try:
            if torch.version.cuda is None:  # a CPU build of torch
                verdict = "no_gpu"
            elif getattr(torch._C, "_cuda_isInBadFork")():  # noqa: B009 - not in torch's stubs
                verdict = "poisoned: this process reached the CUDA driver before forking"
            elif not torch.cuda.is_available():
                verdict = "no_gpu"
            else:
                torch.empty(1, device="cuda")
                verdict = "ok"
        except BaseException as exc:
            verdict = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            os.write(write_fd, verdict.encode())
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        verdict = pipe.read().decode(errors="replace") or "probe died"
    os.waitpid(pid, 0)
    return verdict


def _fresh_state(order: orders.RunOrder) -> None:
    """What a fork copies and must not share between candidates: random state and cached temp dirs."""
    worker_repeats.PROBE_ORDER.seed(os.urandom(16))
    random.seed(os.urandom(16))
    torch.seed()
    tempfile.tempdir = None
    os.environ.clear()
    os.environ.update(order.env)
    os.chdir(order.cwd)


def _take_pipes(fds: list[int]) -> int:
    """The candidate's stdin and output become fd 0, 1 and 2; returns its channel's fd."""
    stdin_fd, out_fd, channel_fd = fds
    os.dup2(stdin_fd, 0)
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    os.close(stdin_fd)
    os.close(out_fd)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - fd 0 is the candidate's pipe now
    return channel_fd


def _contain(containment: orders.Containment) -> None:
    """The fork's own network, IPC and PID (and mount) namespaces. A network or IPC namespace the machine
    refuses is skipped, not fatal: the harness sees that in /proc and says so in the result."""
    if containment.netns:
        contain.attempt(contain.enter_net_namespace)
    if containment.ipcns:
        contain.attempt(contain.enter_ipc_namespace)
    if containment.pidns:
        enter_pid_namespace()


def _seal_and_drop(order: orders.RunOrder, containment: orders.Containment) -> None:
    """Once the order names the job: its filesystem sealed (only in a mount namespace of its own: the PID
    namespace's), then no capabilities (sealing needs them). What the machine refuses is named on stderr
    and seen missing by the harness in /proc."""
    if containment.pidns and order.seal:
        seal.report(seal.seal(seal.SealSpec.from_json(order.seal)))
    if containment.no_caps:
        contain.attempt(contain.drop_capabilities)


def _child(sock: socket.socket, order: orders.RunOrder, fds: list[int]) -> None:
    """The forked candidate worker; never returns."""
    code = EXIT_SETUP_FAILED
    try:
        sock.close()
        os.setsid()
        die_with_parent()
        channel_fd = _take_pipes(fds)
        _contain(order.containment)
        _seal_and_drop(order, order.containment)
        _fresh_state(order)
        code = _run_worker(order.request, channel_fd)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


def _prepared_child(
    sock: socket.socket, mine: socket.socket, key: PreparedKey, pinned_bytes: int = 0
) -> None:
    """A worker made ahead of its candidate (while the model thinks): in its own session and PID namespace
    and, for a CUDA evaluation, with its CUDA context created, cuBLAS and the CUDA profiler started and
    `pinned_bytes` of host memory pinned for its kept outputs (trusted code only), it reports `prepared`,
    then waits for one order, seals its filesystem for that order's job, drops its capabilities and runs it
    exactly as `_child` would. Single use."""
    code = EXIT_SETUP_FAILED
    try:
        sock.close()
        os.setsid()
        die_with_parent()
        _contain(key.containment)
        if key.kind == "cuda":
            worker_usage.warm_up_cuda(pinned_bytes)
        else:
            worker_usage.cpu_usage.warm_up()  # the CPU profiler's first start: 1-4 s on 2 busy cores, ~1 ms after
        # An order may already wait in the socket, the zygote's end closed behind it: read it all the same.
        with contextlib.suppress(OSError):
            mine.send(b"prepared")
        raw, fds, _, _ = socket.recv_fds(mine, MAX_CONTROL, 3)
        if not raw or len(fds) != 3:
            _exit(0)
        mine.close()
        order = orders.RunOrder.model_validate_json(raw)
        channel_fd = _take_pipes(fds)
        _seal_and_drop(order, key.containment)
        _fresh_state(order)
        code = _run_worker(order.request, channel_fd)
    except BaseException:
        traceback.print_exc()
    finally:
        _exit(code)


def _exit(code: int) -> None:
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _run_worker(request_path: str, channel_fd: int) -> int:
    try:
        code: int = worker_candidate.main(request_path, str(channel_fd))
        return code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        return 1


def _send(sock: socket.socket, report: wire.ZygoteReport) -> None:
    sock.send(report.model_dump_json().encode())


def _kill_all(children: set[int]) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@dataclass(frozen=True)
class PreparedKey:
    """Which orders a worker made ahead of need may serve: their kind ("cuda" or "cpu") and containment."""

    kind: orders.WorkerKind
    containment: orders.Containment


class Server:
    """The zygote's state: its control socket, the children it forked, the worker made ahead of need."""

    def __init__(self, sock: socket.socket, pidns: bool, support: dict[str, str]) -> None:
        self.sock, self.pidns = sock, pidns
        self.netns, self.no_caps = not support["netns"], not support["no_caps"]
        self.ipcns = not support["ipcns"]
        self.children: set[int] = set()
        self.prepared: dict[int, socket.socket] = {}  # pid -> our end of its socket, oldest first
        self.prepared_kind: PreparedKey | None = None  # which orders it may serve
        self.pinned_bytes = 0  # what a CUDA worker made from now on pins (the latest PrepareOrder's)
        self.reported: set[int] = set()  # prepared workers whose `prepared` we relayed

    def _fork(self) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        return os.fork()

    def _contained(self, asked: orders.Containment) -> orders.Containment:
        """The containment this zygote's children can enter, of what an order asks for."""
        return asked.within(self.pidns, self.netns, self.no_caps, self.ipcns)

    def prepare(self, order: orders.PrepareOrder) -> None:
        """Make a worker ahead of need, unless one of that kind is waiting already (one of another kind is
        replaced: the evaluator has moved to another problem, or asks for other containment). One still
        being made is said to be prepared when it is (`relay_prepared`), not now: a harness that waits for
        it (a prefetch) must wait for the real thing (on the H200 its profiler's start alone takes ~4 s)."""
        kind = PreparedKey(order.kind, self._contained(order.containment))
        self.pinned_bytes = order.pinned_bytes
        if self.prepared_kind != kind:
            for pid, ours in list(self.prepared.items()):
                self.prepared.pop(pid)
                ours.close()  # it reads an empty order and exits
            self.prepared_kind = kind
        for pid in self.prepared:
            if pid in self.reported:
                _send(self.sock, wire.WorkerPrepared(pid=pid))
        for _ in range(order.count - len(self.prepared)):
            self._make_prepared(kind)

    def _make_prepared(self, kind: PreparedKey) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = self._fork()
        if pid == 0:
            ours.close()
            for other in self.prepared.values():  # the other prepared workers' order sockets: a candidate
                other.close()  # holding one could send that worker an order of its own before the zygote
            _prepared_child(self.sock, theirs, kind, self.pinned_bytes)
        theirs.close()
        self.children.add(pid)
        self.prepared[pid] = ours
        _send(self.sock, wire.Preparing(pid=pid))  # from now on the harness's sweeps spare it

    def run(self, order: orders.RunOrder, fds: list[int]) -> None:
        """One candidate: the worker made ahead where one of its kind waits, else a fresh fork. A CUDA worker
        taken is replaced at once, not at the next evaluation's start: there a worker's start (~4 s) outlasted
        the next truth's making, and with two trajectories every other evaluation waited 1-2 s for its worker
        while the device was held for it (H200, 2026-12-04). A CUDA worker's start moves no device clock; a
        CPU worker's would move the host's, so it is made only when an evaluation asks."""
        order = order.model_copy(update={"containment": self._contained(order.containment)})
        key = PreparedKey(order.kind, order.containment) if order.kind is not None else None
        if key is not None and key == self.prepared_kind and self.prepared:
            ready = [p for p in self.prepared if p in self.reported]
            pid = ready[0] if ready else next(iter(self.prepared))  # else the one furthest along
            ours = self.prepared.pop(pid)
            try:
                socket.send_fds(ours, [order.model_dump_json().encode()], fds)
            except OSError:
                pid = 0
            ours.close()
            if pid:
                for fd in fds:
                    os.close(fd)
                _send(self.sock, wire.Spawned(pid=pid, prepared=True))
                if key.kind == "cuda":  # its replacement starts now, beside this candidate (see below)
                    self._make_prepared(key)
                return
        pid = self._fork()
        if pid == 0:
            for other in self.prepared.values():
                other.close()
            _child(self.sock, order, fds)
        for fd in fds:
            os.close(fd)
        self.children.add(pid)
        _send(self.sock, wire.Spawned(pid=pid, prepared=False))

    def relay_prepared(self, readable: list[Any]) -> None:
        for pid, ours in list(self.prepared.items()):
            if ours in readable and pid not in self.reported:
                ok = ours.recv(64) == b"prepared"
                self.reported.add(pid)
                if ok:
                    _send(self.sock, wire.WorkerPrepared(pid=pid))
                else:  # it died preparing; its exit is reported by the reaper
                    self.prepared.pop(pid).close()
                    _send(self.sock, wire.PrepareFailed(pid=pid))

    def reap(self) -> None:
        for pid in list(self.children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                self.children.discard(pid)
                if pid in self.prepared:
                    self.prepared.pop(pid).close()
                _send(self.sock, wire.Exited(pid=pid, returncode=os.waitstatus_to_exitcode(status)))


def main(control_fd: str) -> int:
    """Fork a candidate worker per order (several may run at once: parallel compiles), or hand it to the
    prepared CUDA worker; report each exit. When the harness goes away (the socket closes), every child
    still running is killed."""
    sock = socket.socket(fileno=int(control_fd))
    import_harness()
    if os.environ.get("KERNEL_AGENT_TEST_POISON_FORK") == "1":  # tests: what a stray device query does
        torch._C._cuda_getDeviceCount()
    pidns = _probe_pid_namespace()
    support = contain.probe()
    ready = wire.ZygoteReady(
        pid=os.getpid(), pidns=pidns, cuda_fork=_probe_cuda_fork(),
        netns_refused=support["netns"], no_caps_refused=support["no_caps"], ipcns_refused=support["ipcns"],
    )  # fmt: skip
    _send(sock, ready)
    server = Server(sock, pidns, support)
    while True:
        waiting = [s for pid, s in server.prepared.items() if pid not in server.reported]
        readable, _, _ = select.select([sock, *waiting], [], [], 0.02)
        if sock in readable:
            raw, fds, _, _ = socket.recv_fds(sock, MAX_CONTROL, 3)
            if not raw:
                _kill_all(server.children)
                return 0
            order = orders.parse_zygote_order(raw)
            if isinstance(order, orders.PrepareOrder):
                server.prepare(order)
            else:
                server.run(order, fds)
        server.relay_prepared(readable)
        server.reap()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
