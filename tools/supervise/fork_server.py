"""The harness's side of the candidate zygote (tools/worker/zygote.py): start it, fork candidates from it
(several at once), hand a candidate to the worker it made ahead of need, stop it. Why a zygote: pool.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tools import orders, wire
from tools.supervise import isolation
from tools.supervise._spawn import (
    ChildOutcome,
    Deadline,
    MessageHandler,
    child_env,
    kill_group,
    supervise,
    track_group,
)
from tools.supervise.jobs import WarmUnavailable
from tools.worker.seal import SealSpec

START_TIMEOUT_S = 180.0
POISON_TEST_ENV = "KERNEL_AGENT_TEST_POISON_FORK"
CUDA_FORK_USABLE = ("ok", "no_gpu")


class Zygote:
    """The fork server's parent side: start it, fork candidates from it (several at once), stop it."""

    def __init__(self, root: Path, extra_env: dict[str, str]) -> None:
        self.token = f"zygote-{uuid.uuid4().hex[:16]}"
        home = root / f"zygote-{self.token[-6:]}"
        self.harness = root / "harness"  # what its children import from, kept in their view of the pool
        home.mkdir(parents=True)
        self.log = home / "zygote.log"
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        extra = {isolation.MARKER_ENV: self.token, **extra_env}
        if os.environ.get(POISON_TEST_ENV):  # tests only: a zygote that reaches the driver before it forks
            extra[POISON_TEST_ENV] = os.environ[POISON_TEST_ENV]
        env = child_env(home, extra, harness=root / "harness")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tools.worker.zygote", str(theirs.fileno())],
                cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True,
            )  # fmt: skip
        theirs.close()
        track_group(self.proc.pid)
        self.pidns: bool | None = None
        self.refused: dict[str, str] = {}  # why its children cannot enter a guard (isolation.observe's names)
        self.cuda_fork = ""  # its probe: "ok", "no_gpu", or why CUDA cannot start in its children
        self.ready = threading.Event()
        self.prepared = threading.Event()  # a CUDA worker made ahead of need is waiting (or failed)
        self.prepared_pids: set[int] = (
            set()
        )  # those made or being made, spared by sweeps after other candidates
        self._ready: set[int] = set()  # of those, the ones that said they are ready
        # Reports that settle an order for a worker made ahead: one ready or failed, or taken by a candidate
        # before it was ready (then no "prepared" ever comes for it). A prefetch waits for one (`settled`).
        self.settles = 0
        self.spawned: queue.Queue[int] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.changed = threading.Condition()
        self.dead = False
        self.order_lock = threading.Lock()
        self.live: set[int] = set()  # forked candidate workers still supervised (parallel compiles)
        self._users = 0  # launches in progress, which a retired zygote outlives (`retire`)
        self._retired = False
        threading.Thread(target=self._read, daemon=True, name="zygote-reader").start()

    def _read(self) -> None:
        """The zygote's reports: ready, each fork's pid (in order), each child's exit."""
        while True:
            try:
                raw = self.sock.recv(1 << 16)
            except OSError:
                raw = b""
            msg = wire.parse_zygote_report(raw) if raw else None
            with self.changed:
                self._note(msg)
                self.changed.notify_all()
            if msg is None or isinstance(msg, wire.ZygoteReady):
                self.ready.set()
            if msg is None:
                return

    def _note(self, msg: wire.ZygoteReport | None) -> None:
        match msg:
            case None:
                self.dead = True
            case wire.ZygoteReady():
                self.pidns, self.cuda_fork = msg.pidns, msg.cuda_fork
                self.refused = {
                    isolation.PIDNS: "" if msg.pidns else "refused in the zygote's children",
                    isolation.NETNS: msg.netns_refused,
                    isolation.NO_CAPS: msg.no_caps_refused,
                    isolation.IPCNS: msg.ipcns_refused,
                    **dict.fromkeys(isolation.SEAL_GUARDS, "" if msg.pidns else "needs the PID namespace"),
                }
            case wire.Spawned():
                self.spawned.put(msg.pid)
                if msg.prepared:
                    self.settles += 1
                    self.prepared_pids.discard(msg.pid)
                    self._ready.discard(msg.pid)
                    if not self._ready:
                        self.prepared.clear()
            case wire.Preparing():
                self.prepared_pids.add(msg.pid)
            case wire.WorkerPrepared():
                self._ready.add(msg.pid)
                self.settles += 1
                self.prepared.set()
            case wire.PrepareFailed():
                self.prepared_pids.discard(msg.pid)
                self.settles += 1
                self.prepared.set()
            case wire.Exited():
                self.exits[msg.pid] = msg.returncode
                self.prepared_pids.discard(msg.pid)
                self._ready.discard(msg.pid)

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def wait_ready(self) -> bool:
        """Whether its children can enter their own PID namespace; raises WarmUnavailable if it never started."""
        if not self.ready.wait(START_TIMEOUT_S) or self.pidns is None:
            raise WarmUnavailable(f"candidate zygote did not start: {self._log_tail()}")
        return self.pidns

    def request_prepared(self, kind: orders.WorkerKind, count: int = 1, pinned_bytes: int = 0) -> bool:
        """Ask for `count` workers made ahead of need for evaluations of `kind` ("cuda": context, cuBLAS and
        the profiler started, `pinned_bytes` of host memory pinned for the kept outputs; "cpu": forked and
        contained, nothing more), counting those made or being made.
        False where a CUDA worker cannot start in the zygote's children. Returns at once: `wait_prepared`
        waits for one."""
        want_pidns = isolation.mode() == isolation.PIDNS
        try:
            if not self.alive() or self.wait_ready() is False and want_pidns:
                return False
        except WarmUnavailable:  # stopped meanwhile (replaced after a fault): the next one is asked anew
            return False
        if kind == "cuda" and self.cuda_fork != "ok":
            return False
        with self.order_lock:
            try:
                order = orders.PrepareOrder(
                    containment=_containment_order(want_pidns),
                    kind=kind,
                    count=count,
                    pinned_bytes=pinned_bytes,
                )
                self.sock.send(order.model_dump_json().encode())
            except OSError:
                return False
        return True

    def wait_prepared(self, timeout: float = START_TIMEOUT_S) -> bool:
        return self.prepared.wait(timeout)

    def settled(self, since: int, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until a worker made ahead is settled after `since` (`settles` read before the order): ready,
        failed, or taken by a candidate; or this zygote is gone. `wait_prepared` alone missed the taking: an
        order that found a worker still being made made none, a candidate then took that one, and the
        prefetch waited START_TIMEOUT_S holding the device shared (each CI run lost ~180 s to it 3-4 times)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.settles > since or self.dead, timeout)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-3:])
        return ""

    def launch(
        self,
        cwd: Path,
        env: dict[str, str],
        request_path: Path,
        deadline: Deadline,
        on_message: MessageHandler,
        seal: SealSpec | None = None,
    ) -> ChildOutcome:
        """Run one candidate worker forked from the zygote; the same supervision as a cold child (`seal`:
        the filesystem it may write, tools/worker/seal.py)."""
        with self._in_use():
            start = time.monotonic()  # waiting for a zygote still starting counts as the candidate's start
            want_pidns = isolation.mode() == isolation.PIDNS
            if not self.wait_ready() and want_pidns:
                raise WarmUnavailable("the zygote's children cannot enter a PID namespace here")
            kind = _worker_kind(request_path)
            if kind == "cuda" and self.cuda_fork not in CUDA_FORK_USABLE:
                raise WarmUnavailable(f"CUDA cannot start in the zygote's children ({self.cuda_fork})")
            seal = _with_harness(seal, self.harness) if seal else None
            stdin_r, stdin_w = os.pipe()
            out_r, out_w = os.pipe()
            chan_r, chan_w = os.pipe()
            order = orders.RunOrder(
                containment=_containment_order(want_pidns),
                kind=kind,
                cwd=str(cwd),
                env=env,
                request=str(request_path),
                seal=seal.to_json() if seal and want_pidns else "",
            )
            try:
                with self.order_lock:
                    socket.send_fds(self.sock, [order.model_dump_json().encode()], [stdin_r, out_w, chan_w])
                    pid = self.spawned.get(timeout=30)
            except (OSError, queue.Empty) as exc:
                for fd in (stdin_w, out_r, chan_r):
                    os.close(fd)
                raise WarmUnavailable(f"candidate zygote did not fork: {exc!r}") from exc
            finally:
                for fd in (stdin_r, out_w, chan_w):
                    os.close(fd)
            self.live.add(pid)
            child = ForkedChild(self, pid, os.fdopen(stdin_w, "wb"), os.fdopen(out_r, "rb"))
            marker = env.get(isolation.MARKER_ENV, "")

            def sweep() -> list[int]:
                return self.sweep_after(pid, marker)

            how = isolation.PIDNS if want_pidns else isolation.GROUP
            refused = self.refused if want_pidns else isolation.cold_refusals()

            def inspect() -> list[str]:  # the worker is PID 1 of the namespace its forked parent made
                return isolation.observe(pid, want_pidns, refused, seal)

            try:
                return supervise(
                    child, chan_r, deadline, on_message, start=start, how=how, sweep=sweep, inspect=inspect
                )
            finally:
                child.close()
                self.live.discard(pid)

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        """A launch in progress: a retired zygote stops only once none is (`retire`)."""
        with self.changed:
            self._users += 1
        try:
            yield
        finally:
            with self.changed:
                self._users -= 1
                last = self._retired and self._users == 0
            if last:
                self.stop()

    def sweep_after(self, pid: int, marker: str) -> list[int]:
        """Kill what the finished worker `pid` left behind. A forked child's /proc environ is the zygote's:
        the job's `marker` finds what it exec'd, and the zygote's token what it forked, sparing the zygote
        and the trees of its other children: candidates of other jobs still running, workers made ahead,
        and a fork whose report is still on its way (`live` learns of a fork only once the zygote has
        reported it: a sweep in between killed a parallel compile, SIGKILL, "crashed")."""
        left = isolation.sweep(marker) if marker else []
        others = (isolation.children_of(self.proc.pid) | self.live | self.prepared_pids) - {pid}
        return left + isolation.sweep(self.token, exclude={self.proc.pid}, spare_trees=others)

    def retire(self) -> None:
        """Fork nothing more and stop once the candidates it forked have ended: replaced after a fault in
        one evaluation, it must not kill the others in flight (its children die with it, PR_SET_PDEATHSIG),
        which were then reported "crashed" for a fault not theirs."""
        with self.changed:
            self._retired = True
            idle = self._users == 0
        if idle:
            self.stop()

    def stop(self) -> None:
        self.prepared.set()  # whoever waits for a worker made ahead stops waiting: none will come now
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        track_group(self.proc.pid, live=False)
        isolation.sweep(self.token)
        with contextlib.suppress(OSError):
            self.sock.close()


def _with_harness(seal: SealSpec, harness: Path) -> SealSpec:
    """The zygote's children import what they have not imported yet from the pool's harness: it stays in
    their view where the seal covers the pool (read-only; it holds no job's data)."""
    return dataclasses.replace(seal, keep=[*seal.keep, str(harness)])


def _containment_order(contained: bool) -> orders.Containment:
    """What a fork enters, in the PID-namespace mode: its own PID, network and IPC namespaces, no
    capabilities (the zygote leaves out what its children cannot enter; the harness sees in /proc what they
    did)."""
    return orders.Containment(pidns=contained, netns=contained, no_caps=contained, ipcns=contained)


def _worker_kind(request_path: Path) -> orders.WorkerKind | None:
    """Which prepared worker may serve this request (the harness wrote it; it is trusted): "cuda" (the
    worker creates a CUDA context) or "cpu" for an evaluation, None for a compile
    (a compile needs no CUDA context, and must not take the worker the next evaluation waits for)."""
    request = orders.CandidateRequest.model_validate_json(request_path.read_text())
    if request.mode == "compile":
        return None
    return request.device


class ForkedChild:
    """A candidate worker forked by the zygote, seen through the zygote's reports of its exit."""

    def __init__(self, zygote: Zygote, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.zygote, self.pid, self.stdin, self.stdout = zygote, pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.pid in self.zygote.exits:
                self.returncode = self.zygote.exits.pop(self.pid)
            elif self.zygote.dead:  # the zygote is gone; its child went with it (PR_SET_PDEATHSIG)
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self) -> int:
        with self.zygote.changed:
            self.zygote.changed.wait_for(lambda: self.poll() is not None, timeout=30)
        if self.returncode is None:  # a zygote that does not report is not trusted again
            self.zygote.stop()
            self.returncode = -signal.SIGKILL
        return self.returncode

    def close(self) -> None:
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()
