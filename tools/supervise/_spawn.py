"""Child processes for untrusted code: allowlisted environment, own process group, bounded output,
a result channel the parent owns, and a deadline after which the whole group is killed.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from tools.secret_env import without_secrets
from tools.supervise import _toolchain as toolchain
from tools.supervise import isolation
from tools.supervise.timeline import tell
from tools.wire import WorkerMessage, parse_worker_message
from tools.worker.seal import SealSpec

M = TypeVar("M")

HARNESS_ROOT = Path(__file__).resolve().parents[2]

# Only these reach a candidate: no API keys, tokens or credentials ever do.
ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TERM",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "CC",
    "CXX",
    "NVCC_CCBIN",
    "OMP_NUM_THREADS",
    "NCCL_NVLS_ENABLE",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
)

MAX_MESSAGE_BYTES = 4 << 20
OUTPUT_HEAD = 6000
OUTPUT_TAIL = 6000

# The GPU this thread's evaluation runs on (benchmark/compile_kernel `gpu=`); its children see only it.
_visible_gpu: contextvars.ContextVar[int | None] = contextvars.ContextVar("visible_gpu", default=None)

_live_groups: set[int] = set()
_live_lock = threading.Lock()


@contextlib.contextmanager
def visible_gpu(gpu: int | None) -> Any:
    """Child processes started in this block see only GPU `gpu` (an index into the visible GPUs)."""
    token = _visible_gpu.set(gpu)
    try:
        yield
    finally:
        _visible_gpu.reset(token)


def cuda_visible_devices(gpu: int) -> str:
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[gpu] if gpu < len(visible) else str(gpu)


def child_env(
    workdir: Path, extra: dict[str, str] | None = None, *, harness: Path | None = None
) -> dict[str, str]:
    """The child's whole environment: the allowlist, its own HOME/TMPDIR, and the harness on its path
    (`harness`: the job's snapshot of the harness package, so files changed on disk later have no effect)."""
    parent = without_secrets()  # and no allowlisted variable that carries a secret's value either
    env = {k: parent[k] for k in ENV_ALLOWLIST if k in parent}
    cuda_home = toolchain.cuda_home()
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    # Without an explicit arch list torch builds for every arch it knows when no GPU is visible.
    env.setdefault("TORCH_CUDA_ARCH_LIST", toolchain.gpu_arch() or "9.0")
    env.update(
        HOME=str(workdir),
        TMPDIR=str(workdir / "tmp"),
        # The harness's own import path (e.g. wheels unpacked beside the image's Python): no secrets in it.
        PYTHONPATH=os.pathsep.join(
            [str(harness or HARNESS_ROOT), *filter(None, parent.get("PYTHONPATH", "").split(os.pathsep))]
        ),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        TORCH_EXTENSIONS_DIR=str(workdir / "torch_extensions"),
    )
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    if (gpu := _visible_gpu.get()) is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices(gpu)
    env.update(extra or {})
    return env


class BoundedOutput:
    """Keeps the head and tail of a stream; a 100 MB spam costs a few kilobytes."""

    def __init__(self, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._head_cap, self._tail_cap = head, tail

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self._tail_cap:
                del self.tail[: len(self.tail) - self._tail_cap]

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        if self.total <= len(self.head) + len(self.tail):
            return head + self.tail.decode(errors="replace")
        skipped = self.total - len(self.head) - len(self.tail)
        return f"{head}\n… [{skipped:,} bytes of output omitted] …\n{self.tail.decode(errors='replace')}"


@dataclass
class ChildOutcome:
    returncode: int | None
    timed_out: bool
    seconds: float
    messages: list[WorkerMessage] = field(default_factory=list)
    output: str = ""
    output_bytes: int = 0
    bad_messages: int = 0
    handler_errors: list[str] = field(default_factory=list)
    isolation: str = ""
    containment: list[str] = field(default_factory=list)  # what the parent saw contain it (isolation.observe)
    swept: list[int] = field(default_factory=list)
    arrivals: list[tuple[str, float]] = field(default_factory=list)  # (event, seconds since start)
    notices: list[str] = field(default_factory=list)  # how it ran, where that differs from the default
    fell_back: bool = False  # warm workers were asked for and could not serve: it ran cold
    timeout_reason: str = ""  # which bound ran out (tools/supervise/watchdog.py)
    cache_tampering: list[str] = field(default_factory=list)  # what it changed in the build cache (dropped)

    def first(self, kind: type[M]) -> M | None:
        """The first message of this type, if one came."""
        return next((m for m in self.messages if isinstance(m, kind)), None)

    def all(self, kind: type[M]) -> list[M]:
        return [m for m in self.messages if isinstance(m, kind)]

    def at(self, event: str) -> float | None:
        """When the first message of this kind arrived (seconds since the child started), if it did."""
        return next((t for e, t in self.arrivals if e == event), None)

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-self.returncode).name
            return f"signal {-self.returncode}"
        return None


def _drain(stream: Any, sink: BoundedOutput) -> None:
    for chunk in iter(lambda: stream.read1(65536), b""):
        sink.feed(chunk)


def _read_messages(
    fd: int,
    out: list[WorkerMessage],
    bad: list[int],
    on_message: Callable[[WorkerMessage], None],
    errors: list[str],
) -> None:
    """Read the child's channel defensively: every line is validated as a typed message (tools.wire);
    oversized, malformed or unknown lines are counted, never trusted."""
    with os.fdopen(fd, "rb") as stream:
        for raw in stream:
            msg = parse_worker_message(raw) if len(raw) <= MAX_MESSAGE_BYTES else None
            if msg is None:
                bad.append(1)
                continue
            out.append(msg)
            try:
                on_message(msg)
            except Exception as exc:  # a harness bug must surface as data, not a silent dead reader
                errors.append(f"{type(exc).__name__}: {exc}")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def track_group(pgid: int, live: bool = True) -> None:
    """Count a long-lived worker's group among those `kill_all_children` kills (Ctrl-C, shutdown)."""
    with _live_lock:
        if live:
            _live_groups.add(pgid)
        else:
            _live_groups.discard(pgid)


def kill_all_children() -> None:
    """Kill every live candidate/truth process group (Ctrl-C, shutdown); a worker in a PID namespace
    takes its whole namespace with it."""
    with _live_lock:
        groups = list(_live_groups)
    for pgid in groups:
        kill_group(pgid)


class Deadline:
    """A movable deadline: the candidate worker gets the compile budget, then the evaluation budget."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def extend_to(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    @property
    def expired(self) -> bool:
        return time.monotonic() > self.at


MessageHandler = Callable[[WorkerMessage], str | None]


class ChildProcess(Protocol):
    """What supervision needs of a child: `subprocess.Popen`, or a worker forked by a warm zygote."""

    pid: int
    returncode: int | None

    @property  # read-only here: a forked worker's pipes are never None, a Popen's may be
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


def run_child(
    module: str,
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    deadline: Deadline,
    on_message: MessageHandler | None = None,
    isolate: bool = False,
    wrapper: Sequence[str] = (),
    seal: SealSpec | None = None,
) -> ChildOutcome:
    """Run `python -m module ARGS CHANNEL_FD` in its own session; kill the group at the deadline.

    `on_message` sees each message as it arrives; a string it returns is written to the child's stdin
    as one line (the parent's decisions, e.g. whether to go on to timing). `isolate` (untrusted code)
    runs it in a PID namespace where the machine allows, and afterwards sweeps any process left carrying
    the job marker of `env` (see tools/supervise/isolation.py). `wrapper`: a command that runs the worker as
    its own child (compute-sanitizer), inside the same containment; the channel's descriptor passes through it.
    `seal`: the filesystem the isolated child may write (tools/worker/seal.py).
    """
    read_fd, write_fd = os.pipe()
    cmd = [*wrapper, sys.executable, "-m", module, *args, str(write_fd)]
    how = isolation.mode() if isolate else ""
    if isolate:
        cmd = isolation.wrap(cmd, seal)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        start_new_session=True,
    )
    os.close(write_fd)
    marker = env.get(isolation.MARKER_ENV)
    nested = how == isolation.PIDNS  # the worker is the child of `unshare`
    inspect = (
        (lambda: isolation.observe(proc.pid, nested, isolation.cold_refusals(), seal)) if isolate else None
    )
    return supervise(
        proc,
        read_fd,
        deadline,
        on_message,
        start=start,
        how=how,
        sweep=lambda: _sweep(marker),
        inspect=inspect,
        who=module.rpartition(".")[2],
    )


def _sweep(marker: str | None) -> list[int]:
    return isolation.sweep(marker) if marker else []


def supervise(
    proc: ChildProcess,
    read_fd: int,
    deadline: Deadline,
    on_message: MessageHandler | None,
    *,
    start: float,
    how: str,
    sweep: Callable[[], list[int]],
    inspect: Callable[[], list[str]] | None = None,
    who: str = "candidate",
) -> ChildOutcome:
    """Read the child's channel and output until it exits or the deadline passes; then kill its group
    and `sweep` whatever it left. The outcome records when each message arrived (the phase breakdown).
    `inspect` says what contains the child (isolation.observe); it runs when the child first reports
    `ready`: its containment is complete then, and without capabilities nothing it runs later can undo it.
    `who` names the worker to `listen`ers."""
    with _live_lock:
        _live_groups.add(proc.pid)
    tell(who, "spawn")

    def reply(msg: WorkerMessage) -> None:
        answer = on_message(msg) if on_message is not None else None
        if answer is not None and proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.write(answer.encode() + b"\n")
                proc.stdin.flush()

    output = BoundedOutput()
    messages: list[WorkerMessage] = []
    arrivals: list[tuple[str, float]] = []
    bad: list[int] = []
    handler_errors: list[str] = []

    containment: list[str] = []

    def on_raw(msg: WorkerMessage) -> None:
        arrivals.append((msg.event, time.monotonic() - start))
        tell(who, msg.event, getattr(msg, "name", None))
        if inspect is not None and msg.event == "ready" and not containment:
            containment.extend(inspect())
        reply(msg)

    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, output), daemon=True),
        threading.Thread(
            target=_read_messages, args=(read_fd, messages, bad, on_raw, handler_errors), daemon=True
        ),
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        while proc.poll() is None:
            if deadline.expired:
                timed_out = True
                break
            time.sleep(0.02)
    finally:
        # Whatever the child left behind in its group goes with it.
        kill_group(proc.pid)
        proc.wait()
        with _live_lock:
            _live_groups.discard(proc.pid)
    swept = sweep()
    for t in readers:
        t.join(timeout=5)
    tell(who, "exit")
    if inspect is not None and not containment:
        containment.append(
            f"{isolation.UNCONTAINED}: unverified (the worker exited before it reported ready)"
        )
    return ChildOutcome(
        returncode=proc.returncode,
        timed_out=timed_out,
        seconds=time.monotonic() - start,
        messages=messages,
        output=output.text(),
        output_bytes=output.total,
        bad_messages=len(bad),
        handler_errors=handler_errors,
        isolation=how,
        containment=containment,
        swept=swept,
        arrivals=arrivals,
    )
