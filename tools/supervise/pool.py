"""Warm evaluation workers: no Python + torch start-up per candidate, truth prepared ahead of time.

A `WarmPool` holds the warm workers of one device and thread budget (`pool_for(gpu, threads)`; `benchmark`
and `compile_kernel` use the default one unless `KERNEL_AGENT_WARM=0`). A CPU problem's pool starts every
process with that problem's thread budget (tools.host.timing_threads) in its environment:

* a **candidate zygote** (tools/worker/zygote.py): a fork server that has imported torch and the harness but
  never initialised CUDA. Every candidate runs in a fresh process forked from it, in its own session and
  (where the machine allows) its own PID + mount namespace, with the job's working dir, allowlisted
  environment and pipes — what the cold path gives it, minus ~3 s of interpreter and torch import.
* a **truth server** per problem (tools/worker/truth.py --serve, supervised by tools/supervise/truth_server.py): the trusted reference side, CUDA
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
(`cuda_init` in the phase breakdown; bench/warm_vs_cold.py and bench/cuda_startup.py measure it), which is
the price of that guarantee. The zygote itself is still replaced after any fault, timeout, flag or leftover process
(in process-group mode a candidate of the same user can reach it), and restarted if it died.

A timed loop never shares the device: it holds the pool's device lock exclusively (a candidate's timing
phase, the paired check of the reference, a re-measurement, the baselines, the profiler, the sanitizer),
while the truth server's device work (a truth, a re-check of timed outputs) and a candidate's life (its
correctness cases) hold it shared, beside one another (two trajectories' evaluations overlap there) but
never beside a timed loop. A CUDA evaluation's host work holds nothing: building inputs, writing files,
judging, a worker's start, so another trajectory's loop is timed meanwhile. A CPU problem's evaluation
holds it shared throughout: all its work runs on the device it times.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import orders
from tools.knobs import whole_number
from tools.supervise._spawn import (
    ChildOutcome,
    Deadline,
    MessageHandler,
    cuda_visible_devices,
)
from tools.supervise.cpu_budget import cpu_env
from tools.supervise.fork_server import Zygote
from tools.supervise.integrity import HARNESS
from tools.supervise.jobs import scratch_home
from tools.supervise.locks import DeviceTurns, SharedExclusiveLock
from tools.supervise.orphans import new_pool_folder
from tools.supervise.truth_server import TruthServer
from tools.worker.seal import SealSpec

WARM_ENV = "KERNEL_AGENT_WARM"
SHM = Path("/dev/shm")
AHEAD = 2  # evaluations of one problem prepared ahead at most (one per trajectory of a parallel run)
# A CUDA problem's truth servers at most (`truth_server`): one per trajectory, whose evaluation's truth and
# re-check it keeps, and one for the truth made ahead as an evaluation starts beside another
# (tools/judge/_ahead.py `made_beside`): sent to a claimed server, it would hold that evaluation's re-check.
TRUTH_SERVERS = AHEAD + 1
TRUTH_SERVERS_ENV = "KERNEL_AGENT_TRUTH_SERVERS"


def truth_servers_most() -> int:
    """A CUDA problem's truth servers at most: `KERNEL_AGENT_TRUTH_SERVERS` where set (a whole number >= 1),
    else `TRUTH_SERVERS`. At four trajectories a GPU their re-checks queued ~1 s behind one another on the
    three (H100, 4d5cf86, 2026-12-07): the knob measures more before the default follows the trajectories."""
    return whole_number(TRUTH_SERVERS_ENV, TRUTH_SERVERS, "a CUDA problem's truth servers at most")


SHM_MIN_FREE = 8 << 30  # the selective scan's jobs hold ~2.5 GB at their peak (a job made ahead less)


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


EVALUATIONS_PER_GPU = 4
"""Evaluations in flight on one GPU with warm workers: their timed loops take the device alone, in turn
(tools/supervise/locks.py), while the others' truth, checks, judging and candidates' correctness cases run
beside each other. At two a GPU, four trajectories ran no faster than two (H100, 340a5cf, 2026-12-07: 1615
and 1670 an hour): two of them always waited for the lease (agent/execution/leases.py). The cold path has
no device lock: one evaluation a GPU there. `KERNEL_AGENT_EVALS_PER_GPU` sets another number."""
EVALS_ENV = "KERNEL_AGENT_EVALS_PER_GPU"


def evaluations_per_gpu() -> int:
    """Evaluations one GPU takes at once: `KERNEL_AGENT_EVALS_PER_GPU` where set (a whole number >= 1), else
    `EVALUATIONS_PER_GPU` with warm workers and 1 without (the cold path has no device lock)."""
    if not warm_enabled():
        return 1
    return whole_number(EVALS_ENV, EVALUATIONS_PER_GPU, "the evaluations one GPU takes at once")


def scratch_root() -> Path:
    """tmpfs where it has room, else this user's scratch home in the temporary folder (where a sealed worker
    covers it as it covers /dev/shm: tools/supervise/jobs.py `scratch_home`)."""
    try:
        if SHM.is_dir() and os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= SHM_MIN_FREE:
            return SHM
    except OSError:
        pass
    return scratch_home()


@dataclass
class _Pending:
    thread: threading.Thread | None = None
    result: list[Any] = field(default_factory=list)


class WarmPool:
    """The warm workers of one device: a candidate zygote, truth servers per problem, prepared jobs.
    `threads`: a CPU problem's thread budget, in the environment its zygote and truth servers start with
    (set per request instead, it did not hold: a quiet evaluation measured 2.0x once and 3.9x twice)."""

    def __init__(self, gpu: int | None = None, threads: int | None = None) -> None:
        self.gpu = gpu
        self.extra_env = {"CUDA_VISIBLE_DEVICES": cuda_visible_devices(gpu)} if gpu is not None else {}
        self.extra_env.update(cpu_env(threads))
        # Held until shutdown, released by the kernel however this process ends; a later pool sweeps it then.
        self.root, self._alive = new_pool_folder(scratch_root())
        HARNESS.write_package(self.root / "harness")
        self.jobs_dir = self.root / "jobs"
        self.staging = self.root / "staging"
        for path in (self.jobs_dir, self.staging):
            path.mkdir(mode=0o700)
        # Timed loops hold the device alone; truth, checks and judging share it (tools/supervise/locks.py).
        self.device = SharedExclusiveLock()
        self._lock = threading.Lock()
        self._zygote: Zygote | None = None
        self._truth: dict[str, list[TruthServer]] = {}  # per problem, up to the `most` its callers ask
        self._pending: dict[str, list[_Pending]] = {}  # per problem, oldest first
        self.closed = False
        self.running = 0  # evaluations on this pool now (`evaluating`)
        self.kept_bytes = 0  # what a CUDA worker made from now on pins for its kept outputs (`expect_kept`)

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
        seal: SealSpec | None = None,
    ) -> ChildOutcome:
        return self.zygote().launch(cwd, env, request_path, deadline, on_message, seal)

    def expect_kept(self, nbytes: int) -> None:
        """The pinned host memory the latest evaluation's worker needed for a shape's kept outputs: CUDA
        workers made from now on pin that much as they start, while no candidate waits for them (bounded). An
        evaluation whose truth failed knows none: the hint stays."""
        if nbytes > 0:
            self.kept_bytes = min(nbytes, orders.MAX_PINNED_AHEAD)

    def _pinned(self, kind: orders.WorkerKind) -> int:
        return self.kept_bytes if kind == "cuda" else 0

    def prepare_worker(self, kind: orders.WorkerKind, count: int = 1) -> None:
        """Start making workers for evaluations of `kind` now, up to `count` made or being made, beside the
        truth of an evaluation, and return at once: a zygote still starting (its torch import: 1.5 s on a 2-core CPU) takes the order from
        a thread once it is up. Asked inline, the evaluation waited for that start before its truth began
        (on the H200 part of ~6 s that no phase named, in every one-shot `agent bench`)."""
        zygote = self.zygote()
        if zygote.ready.is_set():
            zygote.request_prepared(kind, count, self._pinned(kind))
            return
        threading.Thread(
            target=zygote.request_prepared,
            args=(kind, count, self._pinned(kind)),
            name="prepare-worker",
            daemon=True,
        ).start()

    def replace_zygote(self) -> None:
        """After a fault, timeout, flag or leftover process: a new zygote, started now in the background."""
        with self._lock:
            old, self._zygote = self._zygote, None
        if old is not None:
            old.retire()  # other evaluations' candidates it forked finish first
        if not self.closed:
            self.zygote()

    def zygote_pid(self) -> int | None:
        return self._zygote.proc.pid if self._zygote is not None and self._zygote.alive() else None

    # --- truth side ----------------------------------------------------------------------------------

    def truth_server(self, key: str, most: int = 1, own: TruthServer | None = None) -> TruthServer:
        """A truth server of problem `key`, claimed for the caller (`TruthServer.release` gives it back): one
        neither busy nor claimed where there is one, else a new one while the problem has fewer than `most`,
        else the least claimed of the idle ones, else of all. One server answers one request at a time, and a
        request may wait there for its turn on the device: two trajectories' truths, re-checks and paired
        checks then seldom queue behind one another. A claimed server keeps an evaluation's truth, whose
        re-check will come to it: on the H200 one trajectory's truth sent there held the other's re-check
        ~1.1 s. Starting one stops the other problems' servers that nobody claims: one problem at a time
        bounds device memory, but an evaluation in flight (a suite's other problem, say) keeps its server
        and the truth it keeps there. `own`: the server the caller's evaluation claims, taken first where idle
        (its paired check: the H200's first one waited ~3 s for a second server's start)."""
        with self._lock:
            servers = self._truth.setdefault(key, [])
            servers[:] = [s for s in servers if s.alive()]
            if own is not None and own in servers and not own.busy() and own.claim():
                return own
            by_claims = sorted(servers, key=lambda s: s.claims)  # stable: the oldest first among equals
            idle = [s for s in by_claims if not s.busy()]
            if len(servers) < most:
                idle = [s for s in idle if s.claims == 0]  # else a new one rather than a claimed one
            for server in idle if idle or len(servers) < most else by_claims:
                if server.claim():
                    return server
            for name, others in list(self._truth.items()):
                if name != key:
                    others[:] = [o for o in others if not (o.retire_if_idle() or not o.alive())]
                    if not others:
                        del self._truth[name]
            server = TruthServer(self.root, self.extra_env)
            server.claim()
            servers.append(server)
            return server

    def run_truth(
        self,
        key: str,
        request: orders.ServedRequest,
        deadline: Deadline,
        device: DeviceTurns | None = None,
        most: int = 1,
        own: TruthServer | None = None,
    ) -> ChildOutcome:
        """One request to a server of `key` (`truth_server`); `device`: the caller's turns (TruthServer.request)."""
        server = self.truth_server(key, most, own)
        try:
            return server.request(request, deadline, device)
        finally:
            server.release()

    def start_prefetch(
        self, key: str, prepare: Callable[[], Any] | None, *, worker: orders.WorkerKind | None = None
    ) -> None:
        """Prepare the next evaluation of `key` in the background: its truth (`prepare`, where given) and, for
        a CUDA problem, a CUDA worker made ahead of need. A CPU problem's holds the device shared throughout
        (its truth, its worker's start: all on the timed device); a CUDA problem's holds nothing itself (a
        worker's start moves no device clock), its truth server takes the device for its device work. Up to
        one more than the evaluations still running on this pool are made or waiting at once, `AHEAD` at most:
        two trajectories each find one, and a lone trajectory's next truth is not made beside its own timing
        (beside another's it is: tools/judge/_ahead.py `made_beside`)."""
        with self._lock:
            queue = self._pending.setdefault(key, [])
            if self.closed or len(queue) >= min(AHEAD, 1 + self.running):
                return
            pending = _Pending()
            queue.append(pending)

        count = len(queue)  # this prefetch's worker and those of the ones before it still waiting

        def run() -> None:
            if self.closed:
                return
            cuda = worker == "cuda"  # its start runs beside the truth: it moves no device clock
            zygote, since = self._zygote_and_settles() if cuda else (None, 0)
            asked = zygote is not None and zygote.request_prepared("cuda", count, self._pinned("cuda"))
            if prepare is not None:
                with contextlib.suppress(Exception):  # a failed prefetch is just not there
                    pending.result.append(prepare())
            if worker is None or self.closed:
                return
            # A CPU worker's start runs on the device CPU loops are timed on: after the truth, held shared.
            with contextlib.nullcontext() if cuda else self.device.shared():
                if not cuda:  # the zygote now: one replaced after a fault meanwhile was asked nothing
                    zygote, since = self._zygote_and_settles()
                    asked = zygote.request_prepared(worker, count)
                if asked and zygote is not None:  # wait on the zygote asked, not on its replacement
                    zygote.settled(since)

        pending.thread = threading.Thread(target=run, daemon=True, name=f"prefetch-{key[:8]}")
        pending.thread.start()

    def _zygote_and_settles(self) -> tuple[Zygote, int]:
        """The zygote, and its count of settled workers made ahead before an order is sent (`Zygote.settled`)."""
        zygote = self.zygote()
        with zygote.changed:
            return zygote, zygote.settles

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """One evaluation in flight on this pool (prefetches made ahead follow how many there are)."""
        with self._lock:
            self.running += 1
        try:
            yield
        finally:
            with self._lock:
                self.running -= 1

    def take_prefetched(self, key: str) -> Any | None:
        """The oldest prepared evaluation for `key` (waiting for it if it is still being made), or None."""
        with self._lock:
            queue = self._pending.get(key) or []
            pending = queue.pop(0) if queue else None
        if pending is None:
            return None
        if pending.thread is not None:
            pending.thread.join()
        return pending.result[0] if pending.result else None

    def pending(self, key: str) -> int:
        """How many evaluations of `key` are made or being made ahead."""
        return len(self._pending.get(key) or [])

    def wait_prefetch(self, key: str) -> None:
        """Wait until the prefetches of `key` in flight are done (they stay prepared for the next evaluations)."""
        for pending in list(self._pending.get(key) or []):
            if pending.thread is not None:
                pending.thread.join()

    # --- lifetime ------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self.closed = True
        for server in [s for servers in self._truth.values() for s in servers]:
            server.stop()
        if self._zygote is not None:
            self._zygote.stop()
        for pending in [p for queue in self._pending.values() for p in queue]:
            if pending.thread is not None:
                pending.thread.join(timeout=10)
            for item in pending.result:
                with contextlib.suppress(Exception):
                    item.discard()
        self._pending.clear()
        shutil.rmtree(self.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.close(self._alive)


_POOLS: dict[tuple[int | None, int | None], WarmPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(gpu: int | None = None, threads: int | None = None) -> WarmPool | None:
    """The warm workers of one device (None: the default device) and thread budget (a CPU problem's:
    tools.host.timing_threads), or None where warm workers are off."""
    if not warm_enabled():
        return None
    with _POOLS_LOCK:
        ev = _POOLS.get((gpu, threads))
        if ev is None or ev.closed:
            ev = _POOLS[(gpu, threads)] = WarmPool(gpu, threads)
        return ev


def shutdown_all() -> None:
    """Stop every warm worker and remove their folders (atexit; also safe to call any time)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for ev in pools:
        ev.shutdown()


atexit.register(shutdown_all)
