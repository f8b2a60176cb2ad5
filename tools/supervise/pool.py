"""Warm evaluation workers: no Python + torch start-up per candidate, truth prepared ahead of time.

An `WarmPool` holds the warm workers of one device (`pool_for(gpu)`; `benchmark` and
`compile_kernel` use the default one unless `KERNEL_AGENT_WARM=0`):

* a **candidate zygote** (tools/zygote.py): a fork server that has imported torch and the harness but
  never initialised CUDA. Every candidate runs in a fresh process forked from it, in its own session and
  (where the machine allows) its own PID + mount namespace, with the job's working dir, allowlisted
  environment and pipes — what the cold path gives it, minus ~3 s of interpreter and torch import.
* a **truth server** per problem (tools/worker_truth.py --serve): the trusted reference side, CUDA
  initialised once. After each evaluation it prepares the next one's fresh-seeded inputs, weights and
  float64 truth in the background (`prefetch`), so a new candidate finds its data ready. Its requests
  (seeds included) travel over a pipe, never the disk; its truth is taken into the parent's memory and
  unlinked as soon as it is written; prepared jobs wait in a staging folder that every candidate's
  runtime guard treats as secret, and move into place (one rename) when a candidate takes them.
* job folders on tmpfs (`/dev/shm`, where it has room): inputs and outputs of the timing shapes are
  hundreds of MB per evaluation.

Why a zygote and not a persistent CUDA worker reused "while nothing suspicious happened": a Python
process that has run untrusted code cannot be shown clean. A candidate can patch torch functions or the
harness's captured timer references, add import hooks, start threads, change allocator or cuBLAS
settings, keep references to its own extension, or leave persisting-L2 and stream state in the context;
the audit hook it ran under cannot be removed or re-pointed at the next job's folders. None of that
needs to look suspicious. A fork from a process that never ran candidate code starts every candidate
from the same clean state by construction, so "replace the worker after a fault" holds for every
candidate, faulty or not. What the fork does not save is CUDA context creation in each candidate
(`cuda_init` in the phase breakdown; bench/h200_warm.sh measures it on the H200), which is the price of
that guarantee. The zygote itself is still replaced after any fault, timeout, flag or leftover process
(in process-group mode a candidate of the same user can reach it), and restarted if it died.

The device is never shared: a prefetch holds the pool's device lock, and a candidate runs only when
it holds that lock, so prepared truth never overlaps a candidate's timing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools import wire
from tools.supervise import isolation
from tools.supervise._spawn import (
    BoundedOutput,
    ChildOutcome,
    Deadline,
    MessageHandler,
    _drain,
    _read_messages,
    child_env,
    cuda_visible_devices,
    kill_group,
    supervise,
    track_group,
)
from tools.supervise.integrity import HARNESS
from tools.supervise.jobs import WarmUnavailable

WARM_ENV = "KERNEL_AGENT_WARM"
SHM = Path("/dev/shm")
SHM_MIN_FREE = 8 << 30  # the selective scan's jobs hold ~2.5 GB at their peak, two of them at once
START_TIMEOUT_S = 180.0
POISON_TEST_ENV = "KERNEL_AGENT_TEST_POISON_FORK"
CUDA_FORK_USABLE = ("ok", "no_gpu")


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def scratch_root() -> Path | None:
    """tmpfs where it has room, else the default temporary folder (None)."""
    try:
        if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= SHM_MIN_FREE:
            return SHM
    except OSError:
        pass
    return None


class Zygote:
    """The fork server's parent side: start it, fork candidates from it (several at once), stop it."""

    def __init__(self, root: Path, extra_env: dict[str, str]) -> None:
        self.token = f"zygote-{uuid.uuid4().hex[:16]}"
        home = root / f"zygote-{self.token[-6:]}"
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
        self.cuda_fork = ""  # its probe: "ok", "no_gpu", or why CUDA cannot start in its children
        self.ready = threading.Event()
        self.prepared = threading.Event()  # a CUDA worker made ahead of need is waiting (or failed)
        self.prepared_pid: int | None = None  # that worker, spared by the sweeps after other candidates
        self.spawned: queue.Queue[int] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.changed = threading.Condition()
        self.dead = False
        self.order_lock = threading.Lock()
        self.live: set[int] = set()  # forked candidate workers still supervised (parallel compiles)
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
            case wire.Spawned():
                self.spawned.put(msg.pid)
                if msg.prepared:
                    self.prepared.clear()
                    self.prepared_pid = None
            case wire.Preparing():
                self.prepared_pid = msg.pid
            case wire.Prepared() | wire.PrepareFailed():
                self.prepared_pid = msg.pid if isinstance(msg, wire.Prepared) else None
                self.prepared.set()
            case wire.Exited():
                self.exits[msg.pid] = msg.returncode

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def wait_ready(self) -> bool:
        """Whether its children can enter their own PID namespace; raises WarmUnavailable if it never started."""
        if not self.ready.wait(START_TIMEOUT_S) or self.pidns is None:
            raise WarmUnavailable(f"candidate zygote did not start: {self._log_tail()}")
        return self.pidns

    def request_prepared(self, kind: str) -> bool:
        """Ask for a worker made ahead of need for an evaluation of `kind` ("cuda": context, cuBLAS and the
        profiler started; "cpu": forked and contained, nothing more). False where a CUDA worker cannot start
        in the zygote's children. Returns at once: `wait_prepared` waits for it."""
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
                self.sock.send(json.dumps({"op": "prepare", "pidns": want_pidns, "kind": kind}).encode())
            except OSError:
                return False
        return True

    def wait_prepared(self, timeout: float = START_TIMEOUT_S) -> bool:
        return self.prepared.wait(timeout)

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
    ) -> ChildOutcome:
        """Run one candidate worker forked from the zygote; the same supervision as a cold child."""
        start = time.monotonic()  # waiting for a zygote still starting counts as the candidate's start
        want_pidns = isolation.mode() == isolation.PIDNS
        if not self.wait_ready() and want_pidns:
            raise WarmUnavailable("the zygote's children cannot enter a PID namespace here")
        if _needs_cuda(request_path) and self.cuda_fork not in CUDA_FORK_USABLE:
            raise WarmUnavailable(f"CUDA cannot start in the zygote's children ({self.cuda_fork})")
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        chan_r, chan_w = os.pipe()
        order = {
            "cwd": str(cwd), "env": env, "request": str(request_path), "pidns": want_pidns,
            "kind": _worker_kind(request_path),
        }  # fmt: skip
        try:
            with self.order_lock:
                socket.send_fds(self.sock, [json.dumps(order).encode()], [stdin_r, out_w, chan_w])
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
            # A forked child's /proc environ is the zygote's: the job marker finds what it exec'd, and the
            # zygote's marker what it forked (sparing the zygote and candidates of other jobs still running).
            left = isolation.sweep(marker) if marker else []
            others = (self.live - {pid}) | ({self.prepared_pid} if self.prepared_pid else set())
            return left + isolation.sweep(self.token, exclude={self.proc.pid}, spare_trees=others)

        how = isolation.PIDNS if want_pidns else isolation.GROUP
        try:
            return supervise(child, chan_r, deadline, on_message, start=start, how=how, sweep=sweep)
        finally:
            child.close()
            self.live.discard(pid)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        track_group(self.proc.pid, live=False)
        isolation.sweep(self.token)
        with contextlib.suppress(OSError):
            self.sock.close()


def _needs_cuda(request_path: Path) -> bool:
    """Whether the worker will create a CUDA context (the harness wrote this request; it is trusted)."""
    return _worker_kind(request_path) == "cuda"


def _worker_kind(request_path: Path) -> str | None:
    """Which prepared worker may serve this request: "cuda" or "cpu" for an evaluation, None for a compile
    (a compile needs no CUDA context, and must not take the worker the next evaluation waits for)."""
    request = json.loads(request_path.read_text())
    if request.get("mode") == "compile":
        return None
    return "cuda" if request.get("device") == "cuda" else "cpu"


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


class TruthServer:
    """The warm truth worker of one problem: trusted code, CUDA initialised once, one request at a time."""

    def __init__(self, root: Path, extra_env: dict[str, str]) -> None:
        self.home = root / f"truth-{uuid.uuid4().hex[:8]}"
        self.home.mkdir(parents=True)
        read_fd, write_fd = os.pipe()
        env = child_env(self.home, extra_env, harness=root / "harness")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.worker.truth", "--serve", str(write_fd)],
            cwd=self.home, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=(write_fd,), start_new_session=True,
        )  # fmt: skip
        os.close(write_fd)
        track_group(self.proc.pid)
        self.output = BoundedOutput()
        self.inbox: queue.Queue[wire.WorkerMessage] = queue.Queue()
        self.errors: list[str] = []
        for target, args in (
            (_drain, (self.proc.stdout, self.output)),
            (_read_messages, (read_fd, [], [], self.inbox.put, self.errors)),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _next(self, deadline: Deadline) -> wire.WorkerMessage | None:
        while not deadline.expired:
            try:
                return self.inbox.get(timeout=0.05)
            except queue.Empty:
                if not self.alive() and self.inbox.empty():
                    return None
        return None

    def request(self, req: dict[str, Any], deadline: Deadline) -> ChildOutcome:
        """Run one truth request; the outcome looks like a cold truth worker's (messages, arrivals, exit)."""
        start = time.monotonic()
        if not self.ready:
            msg = self._next(Deadline(START_TIMEOUT_S))
            if not isinstance(msg, wire.Ready):
                return self._failed(start, deadline)
            self.ready = True
        rid = uuid.uuid4().hex
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({**req, "id": rid}).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            return self._failed(start, deadline)
        messages: list[wire.WorkerMessage] = []
        arrivals: list[tuple[str, float]] = []
        while (msg := self._next(deadline)) is not None:
            if getattr(msg, "id", None) not in (None, rid):
                continue
            if isinstance(msg, wire.Finished):
                return ChildOutcome(
                    returncode=msg.returncode, timed_out=False, seconds=time.monotonic() - start,
                    messages=messages, output=self.output.text(), arrivals=arrivals,
                )  # fmt: skip
            messages.append(msg)
            arrivals.append((msg.event, time.monotonic() - start))
        outcome = self._failed(start, deadline)
        outcome.messages, outcome.arrivals = messages, arrivals
        return outcome

    def _failed(self, start: float, deadline: Deadline) -> ChildOutcome:
        timed_out = deadline.expired
        self.stop()
        return ChildOutcome(
            returncode=self.proc.returncode, timed_out=timed_out, seconds=time.monotonic() - start,
            output=self.output.text(),
        )  # fmt: skip

    def stop(self) -> None:
        kill_group(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        track_group(self.proc.pid, live=False)


@dataclass
class _Pending:
    thread: threading.Thread | None = None
    result: list[Any] = field(default_factory=list)


class WarmPool:
    """The warm workers of one device: a candidate zygote, truth servers per problem, prepared jobs."""

    def __init__(self, gpu: int | None = None) -> None:
        self.gpu = gpu
        self.extra_env = {"CUDA_VISIBLE_DEVICES": cuda_visible_devices(gpu)} if gpu is not None else {}
        self.root = Path(tempfile.mkdtemp(prefix=f"kagent-warm-{os.getpid()}-", dir=scratch_root()))
        HARNESS.write_package(self.root / "harness")
        self.jobs_dir = self.root / "jobs"
        self.staging = self.root / "staging"
        for path in (self.jobs_dir, self.staging):
            path.mkdir(mode=0o700)
        self.device = threading.Lock()  # a candidate or a prefetch on the device, never both
        self._lock = threading.Lock()
        self._zygote: Zygote | None = None
        self._truth: dict[str, TruthServer] = {}
        self._pending: dict[str, _Pending] = {}
        self.closed = False

    # --- candidate side ------------------------------------------------------------------------------

    def zygote(self) -> Zygote:
        with self._lock:
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.stop()
                self._zygote = Zygote(self.root, self.extra_env)
            return self._zygote

    def launch_candidate(
        self,
        cwd: Path,
        env: dict[str, str],
        request_path: Path,
        deadline: Deadline,
        on_message: MessageHandler,
    ) -> ChildOutcome:
        return self.zygote().launch(cwd, env, request_path, deadline, on_message)

    def prepare_worker(self, kind: str) -> None:
        """Start making a worker for an evaluation of `kind` now (beside the truth of an evaluation)."""
        self.zygote().request_prepared(kind)

    def replace_zygote(self) -> None:
        """After a fault, timeout, flag or leftover process: a new zygote, started now in the background."""
        with self._lock:
            old, self._zygote = self._zygote, None
        if old is not None:
            old.stop()
        if not self.closed:
            self.zygote()

    def zygote_pid(self) -> int | None:
        return self._zygote.proc.pid if self._zygote is not None and self._zygote.alive() else None

    # --- truth side ----------------------------------------------------------------------------------

    def truth_server(self, key: str) -> TruthServer:
        with self._lock:
            server = self._truth.get(key)
            if server is None or not server.alive():
                for other in self._truth.values():  # one problem at a time keeps device memory bounded
                    other.stop()
                server = self._truth[key] = TruthServer(self.root, self.extra_env)
            return server

    def run_truth(self, key: str, request: dict[str, Any], deadline: Deadline) -> ChildOutcome:
        return self.truth_server(key).request(request, deadline)

    def start_prefetch(
        self, key: str, prepare: Callable[[], Any] | None, *, worker: str | None = None
    ) -> None:
        """Prepare the next evaluation of `key` in the background, holding the device while it runs:
        its truth (`prepare`, where given) and, for a CUDA problem, a CUDA worker made ahead of need."""
        if self.closed or key in self._pending:
            return
        pending = _Pending()

        def run() -> None:
            with self.device:
                if self.closed:
                    return
                asked = worker is not None and self.zygote().request_prepared(worker)
                if prepare is not None:
                    with contextlib.suppress(Exception):  # a failed prefetch is just not there
                        pending.result.append(prepare())
                if asked and self._zygote is not None:
                    self._zygote.wait_prepared()

        pending.thread = threading.Thread(target=run, daemon=True, name=f"prefetch-{key[:8]}")
        self._pending[key] = pending
        pending.thread.start()

    def take_prefetched(self, key: str) -> Any | None:
        """The prepared evaluation for `key` (waiting for it if it is still being made), or None."""
        pending = self._pending.pop(key, None)
        if pending is None:
            return None
        if pending.thread is not None:
            pending.thread.join()
        return pending.result[0] if pending.result else None

    def pending(self, key: str) -> bool:
        return key in self._pending

    def wait_prefetch(self, key: str) -> None:
        """Wait until a prefetch of `key` in flight is done (it stays prepared for the next evaluation)."""
        pending = self._pending.get(key)
        if pending is not None and pending.thread is not None:
            pending.thread.join()

    # --- lifetime ------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self.closed = True
        for server in list(self._truth.values()):
            server.stop()
        if self._zygote is not None:
            self._zygote.stop()
        for pending in list(self._pending.values()):
            if pending.thread is not None:
                pending.thread.join(timeout=10)
            for item in pending.result:
                with contextlib.suppress(Exception):
                    item.discard()
        self._pending.clear()
        shutil.rmtree(self.root, ignore_errors=True)


_POOLS: dict[int | None, WarmPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(gpu: int | None = None) -> WarmPool | None:
    """The warm workers of one device (None: the default device), or None where warm workers are off."""
    if not warm_enabled():
        return None
    with _POOLS_LOCK:
        ev = _POOLS.get(gpu)
        if ev is None or ev.closed:
            ev = _POOLS[gpu] = WarmPool(gpu)
        return ev


def shutdown_all() -> None:
    """Stop every warm worker and remove their folders (atexit; also safe to call any time)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for ev in pools:
        ev.shutdown()


atexit.register(shutdown_all)
