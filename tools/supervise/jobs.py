"""One evaluation's folders and child processes, shared by `compile_kernel` and `benchmark`.

Layout of a job (a fresh temporary folder, removed afterwards):
  work/     the candidate's working dir: kernel.py, request.json, its outputs
  shared/   inputs and weights written by the truth worker for the candidate to read
  private/  truth (float64), mode 0700; read by the parent, and removed before the candidate starts
  harness/  the harness package as read at load time (tools.supervise.integrity); workers import it from here
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tools import orders, wire
from tools.cache import build_cache_dir, staged
from tools.host import timing_threads
from tools.problem import Problem
from tools.supervise import isolation
from tools.supervise._spawn import ChildOutcome, Deadline, MessageHandler, child_env, run_child
from tools.supervise.builder import (
    BUILD_SETTINGS as BUILD_SETTINGS,  # the user's, for the build (docs/builds.md)
)
from tools.supervise.builder import TrustedBuilder, staging_root
from tools.supervise.builder import settings_from_environment as settings
from tools.supervise.cpu_budget import cpu_env
from tools.supervise.integrity import HARNESS
from tools.supervise.watchdog import Watchdog
from tools.worker.seal import PUBLISHED_ENV, SealSpec


class WarmUnavailable(RuntimeError):
    """A warm worker could not start or fork; the caller falls back to the cold path."""


def kernel_hash(kernel_code: str) -> str:
    return hashlib.sha256(kernel_code.encode()).hexdigest()[:16]


@dataclass
class Job:
    root: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:16])  # marks its processes and builds

    @classmethod
    def create(cls, kernel_code: str | None, parent: Path | None = None) -> Job:
        """A fresh job folder under `parent` (default: this process's jobs folder in the system's temporary
        folder, which a sealed worker sees only its own job of); a job prepared ahead of its candidate gets
        its kernel later (`write_kernel`)."""
        root = Path(tempfile.mkdtemp(prefix="kagent-job-", dir=parent or default_jobs_dir()))
        for sub in ("work", "shared", "private"):
            (root / sub).mkdir()
        (root / "private").chmod(0o700)
        if kernel_code is not None:
            (root / "work" / "kernel.py").write_text(kernel_code)
        HARNESS.write_package(root / "harness")
        return cls(root)

    def write_kernel(self, kernel_code: str) -> None:
        (self.work / "kernel.py").write_text(kernel_code)

    def move_to(self, parent: Path) -> Path:
        """Move the whole job under `parent` (one rename on the same filesystem); returns the old root."""
        old, self.root = self.root, parent / self.root.name
        old.rename(self.root)
        return old

    @property
    def harness(self) -> Path:
        return self.root / "harness"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    @property
    def private(self) -> Path:
        return self.root / "private"

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


_JOBS_DIRS: dict[int, Path] = {}  # per process (a fork makes its own): the jobs of no warm pool


def scratch_home() -> Path:
    """This user's one folder in the system's temporary folder (`kagent-<uid>`, mode 0700): every harness
    process's cold jobs and any warm pool that found no room on /dev/shm live under it, so a sealed worker
    that covers it sees none of another harness's jobs, including those made after it started. Where the
    name is taken by something this user does not own (or a link), the temporary folder itself, and
    `private_folders` covers only this process's jobs there."""
    tmp = Path(tempfile.gettempdir())
    home = tmp / f"kagent-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        home.mkdir(mode=0o700)
    try:
        st = home.lstat()
    except OSError:
        return tmp
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return tmp
    if stat.S_IMODE(st.st_mode) != 0o700:
        home.chmod(0o700)
    return home


def default_jobs_dir() -> Path:
    """Where this process's jobs go when no warm pool holds them, removed when it exits. Not the temporary
    folder itself: a sealed worker's view of the folder that holds jobs is covered (`seal_for`), and
    covering /tmp would hide what others keep there."""
    pid = os.getpid()
    if pid not in _JOBS_DIRS or not _JOBS_DIRS[pid].is_dir():
        _JOBS_DIRS[pid] = Path(tempfile.mkdtemp(prefix=f"kagent-jobs-{pid}-", dir=scratch_home()))
        atexit.register(shutil.rmtree, _JOBS_DIRS[pid], True)
    return _JOBS_DIRS[pid]


# Folders holding other harnesses' jobs and warm pools (tools/supervise/pool.py), covered in every worker.
SHARED_SCRATCH = Path("/dev/shm")


def private_folders(job: Job, secret_dirs: Iterable[Path] = ()) -> list[str]:
    """The folders a sealed worker of `job` sees only its own job of (tools/worker/seal.py `private`): its
    jobs folder (other candidates' jobs in flight), `secret_dirs` (jobs prepared ahead), the build cache's
    staging (other workers' staged writes), /dev/shm (warm pools, this harness's and others') and this
    user's scratch home (every harness's cold jobs, `scratch_home`). Never the system's temporary folder
    or /, which hold what others need."""
    folders = [SHARED_SCRATCH, scratch_home(), job.root.parent, staging_dir(job).parent, *secret_dirs]
    never = {Path("/"), Path(tempfile.gettempdir())}
    return list(dict.fromkeys(str(f) for f in folders if f.is_dir() and f not in never))


def staging_dir(job: Job) -> Path:
    """Where a sealed worker's writes to the build cache land (reviewed, never published: `review_staging`)."""
    return staging_root() / job.token


def seal_for(job: Job, writable: Sequence[Path] = (), secret_dirs: Iterable[Path] = ()) -> SealSpec:
    """The filesystem a candidate worker of `job` may write: its working dir, and the build cache through an
    overlay onto the job's staging folder (tools/worker/seal.py); the real cache, where the trusted builder
    publishes while the worker runs, shown read-only at `published` (the overlay would keep a lookup that
    missed); and what it may see of the folders that hold other jobs: its own job only (`private_folders`;
    a secret folder it may write, a wrapper's logs, stays). Without a mount namespace of its own (the
    process-group fallback) nothing seals it, and the result says so."""
    staging = staging_dir(job)
    for sub in ("upper", "work", "published"):
        (staging / sub).mkdir(parents=True, exist_ok=True)
    written = [str(job.work), *map(str, writable)]
    cache = str(build_cache_dir())
    return SealSpec(
        writable=written,
        cache=cache,
        upper=str(staging / "upper"),
        overlay_work=str(staging / "work"),
        published=str(staging / "published"),
        private=[f for f in private_folders(job, secret_dirs) if f not in written],
        keep=[str(job.root), str(staging), cache, *written],
    )


def review_staging(job: Job) -> tuple[str, list[str]]:
    """After the worker: what it staged in the build cache reviewed (nothing of it is published: its builds
    came from the trusted builder, tools/supervise/builder.py), the staging folder gone. Returns a notice
    naming what it staged, and what it changed in the cache's existing entries and files (dropped: the cache
    never saw it)."""
    done = staged.review_staged(staging_dir(job) / "upper", build_cache_dir())
    staged.remove_staging(staging_dir(job))
    if not done.rejected:
        return "", done.tampered
    return f"staged in the build cache and not published: {'; '.join(done.rejected[:3])}", done.tampered


def sweep_build_tmp(job: Job) -> None:
    """A build killed mid-way (deadline, crash) leaves its private folder: remove it, never a lock."""
    tmp = build_cache_dir() / ".tmp"
    for path in tmp.glob(f"*-{job.token}-*") if tmp.is_dir() else []:
        shutil.rmtree(path, ignore_errors=True)


def _check_no_secrets(env: dict[str, str], request: orders.CandidateRequest, secrets: Iterable[str]) -> None:
    """Seeds never reach the candidate: a harness bug that leaked one must stop the evaluation."""
    blob = request.model_dump_json() + "\0".join(f"{k}={v}" for k, v in env.items())
    leaked = [s for s in secrets if s and s in blob]
    if leaked:
        raise RuntimeError(f"harness bug: {len(leaked)} secret value(s) would reach the candidate's process")


class Launcher(Protocol):
    """Runs the candidate worker and supervises it: a warm zygote's fork (tools/supervise/pool.py)."""

    def __call__(
        self,
        cwd: Path,
        env: dict[str, str],
        request_path: Path,
        deadline: Deadline,
        on_message: MessageHandler,
        seal: SealSpec | None = None,
    ) -> ChildOutcome: ...


def run_candidate(
    job: Job,
    problem: Problem,
    request: orders.CandidateRequest,
    on_message: MessageHandler | None = None,
    secrets: Iterable[str] = (),
    *,
    launcher: Launcher | None = None,
    secret_dirs: Iterable[Path] = (),
    call_bounds: dict[tuple[str, str], float] | None = None,
    wrapper: Sequence[str] = (),
    extra_env: dict[str, str] | None = None,
    budget_s: float | None = None,
    writable: Sequence[Path] = (),
) -> ChildOutcome:
    """The candidate worker: the compile budget until it reports its import, then bounds derived from the
    work (tools/supervise/watchdog.py, `call_bounds` per case and shape) under the evaluation's budget.

    It runs contained (tools.supervise.isolation), from the job's harness snapshot, with the runtime guard's policy
    in its request and a memory cap on its compiles; afterwards its processes and partial builds are gone.
    `launcher` (warm workers) forks it from a zygote instead of starting a new interpreter; where that is
    not possible it starts cold, and the outcome's notices say why. `secret_dirs`: more folders its guard
    refuses to read (prepared jobs). A sanitizer's run: `wrapper` runs the worker under it (always cold: a
    fork cannot be wrapped), `extra_env` adds its settings, `budget_s` caps the whole run, import included;
    `writable`: folders besides its working dir that it (the wrapper: the sanitizer's logs) may write.
    """
    limits = problem.spec.limits
    deadline = Deadline(limits.compile_timeout_s)
    watchdog = Watchdog(deadline, limits, call_bounds or {}, budget_s=budget_s)

    hidden = [str(job.private), *map(str, secret_dirs)]
    trusted = TrustedBuilder(
        job.harness,
        job.token,
        deadline,
        [job.work, *map(Path, hidden)],
        settings(limits.compile_memory_gb),
        private_folders(job, map(Path, hidden)),
    )

    def handle(msg: wire.WorkerMessage) -> str | None:
        if isinstance(msg, wire.BuildWanted):  # on the worker's clock: a build is part of its import
            return trusted.answer(msg, forward=handle)
        watchdog.on_message(msg)
        if on_message is None:
            return None
        with watchdog.answering():  # the parent's time to answer (the device busy, say) is not the worker's
            return on_message(msg)

    threads = timing_threads(problem)
    update = {"device": problem.spec.device, "secret_dirs": hidden, "threads": threads}
    request = request.model_copy(update=update)
    seal = seal_for(job, writable, map(Path, hidden))
    extra = {
        "KERNEL_AGENT_BUILD_CACHE": str(build_cache_dir()),
        PUBLISHED_ENV: seal.published,
        isolation.MARKER_ENV: job.token,
    }
    extra.update(cpu_env(threads))  # a cold worker's torch, and the candidate's own OpenMP as it loads
    env = child_env(job.work, {**extra, **(extra_env or {})}, harness=job.harness)
    _check_no_secrets(env, request, secrets)
    request_path = job.work / "request.json"
    request_path.write_text(request.model_dump_json())
    try:
        outcome = _launch(
            job, env, request_path, deadline, handle, None if wrapper else launcher, wrapper, seal
        )
    finally:
        trusted.release()
        sweep_build_tmp(job)
        notes, tampered = review_staging(job)
    outcome.notices += [n for n in [notes, *trusted.notices] if n]
    outcome.cache_tampering = tampered
    if outcome.timed_out:
        outcome.timeout_reason = watchdog.explain()
    return outcome


def _launch(
    job: Job,
    env: dict[str, str],
    request_path: Path,
    deadline: Deadline,
    handle: MessageHandler,
    launcher: Launcher | None,
    wrapper: Sequence[str] = (),
    seal: SealSpec | None = None,
) -> ChildOutcome:
    """Forked from the warm zygote where possible, else a fresh process; never a silent fallback."""
    notices: list[str] = []
    if launcher is not None:
        try:
            return launcher(job.work, env, request_path, deadline, handle, seal)
        except WarmUnavailable as exc:
            notices.append(f"warm workers unavailable, the candidate ran in a fresh process: {exc}")
    outcome = run_child(
        "tools.worker.candidate",
        [str(request_path)],
        cwd=job.work,
        env=env,
        deadline=deadline,
        on_message=handle,
        isolate=True,
        wrapper=wrapper,
        seal=seal,
    )
    outcome.notices += notices
    outcome.fell_back = launcher is not None
    return outcome


def describe_exit(outcome: ChildOutcome) -> str:
    if outcome.timed_out:
        why = f": {outcome.timeout_reason}" if outcome.timeout_reason else ""
        return f"timed out after {outcome.seconds:.0f} s (the whole process group was killed){why}"
    if outcome.signal_name == "SIGKILL":
        return (
            "the process died of SIGKILL (sent by the candidate to itself, its parent or its process group, "
            "or by the kernel's out-of-memory killer); the harness is unaffected"
        )
    if outcome.signal_name:
        return f"the process died of {outcome.signal_name}"
    return f"the process exited with code {outcome.returncode}"
