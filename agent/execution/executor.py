"""Where compiles and evaluations run, for one run with any number of trajectories.

Two layers, the one evaluation port of every run (single, parallel, Ray):
- an `Evaluator` does one compile or one evaluation: `compile(problem, code)` and
  `evaluate(problem, code, gpu)`. `LocalEvaluator` calls the two tools (tools/compile_kernel.py,
  tools/benchmark.py), whose child processes do the isolation.
- an `Executor` decides when and where: `LeasedExecutor` (this machine: a compile slot, then a timing
  lease, see agent.execution.leases) or `agent.execution.ray_executor.RayExecutor` (a Ray cluster's resources do the leasing).
  Each reports its leases to `on_event`; the run log records them.

A benchmark is always compile-then-time: the compile runs under a compile lease and fills the
content-keyed build cache, so the evaluation's own import is a cache hit and the timing lease is held for
the evaluation only. A kernel that does not compile is not timed at all. Two trajectories compiling the
same code (samples of one scripted playback, say) build it once: the second waits, then hits the cache.
"""

from __future__ import annotations

import hashlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.execution.leases import Leases
from agent.runlog.events import LeaseEvent
from tools.problem import Problem
from tools.profile_results import ProfileResult
from tools.results import BenchResult, CompileResult, SanitizerReport
from tools.wire import BuildProgress


class Evaluator(Protocol):
    def compile(
        self, problem: Problem, code: str, on_progress: BuildProgress | None = None
    ) -> CompileResult: ...

    def evaluate(
        self, problem: Problem, code: str, gpu: int | None, seed: int | None = None
    ) -> BenchResult: ...

    def kill_all(self) -> None: ...


class LocalEvaluator:
    """The harness's own entry points, in this process (each spawns its isolated child processes)."""

    def compile(self, problem: Problem, code: str, on_progress: BuildProgress | None = None) -> CompileResult:
        from tools import compile_kernel

        return compile_kernel(problem, code, on_progress=on_progress)

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        from tools import benchmark

        return benchmark(problem, code, seed, gpu=gpu)

    def prepare_ahead(self, problem: Problem, gpu: int | None) -> None:
        from tools.benchmark import prepare_ahead

        prepare_ahead(problem, gpu=gpu)

    def sanitize(self, problem: Problem, code: str, gpu: int | None) -> SanitizerReport:
        from tools.judge import sanitize

        return sanitize(problem, code, gpu=gpu)

    def profile(self, problem: Problem, code: str, gpu: int | None) -> ProfileResult:
        from tools import profile_kernel

        return profile_kernel(problem, code, gpu=gpu)

    def kill_all(self) -> None:
        from tools.supervise import kill_all_children

        kill_all_children()


@dataclass(frozen=True)
class KernelJob:
    """One kernel's compile, benchmark or sanitizer run: what it runs on, and what names it in the lease
    events (`kernel_path`, where the run saved it; `trajectory`, None for the run's own). `on_progress`
    hears what its build compiles while it runs (a live display; a Ray task sends back its result only)."""

    problem: Problem
    code: str
    kernel_path: str | None = None
    trajectory: int | None = None
    on_progress: BuildProgress | None = None


def on_host(problem: Problem) -> bool:
    """A CPU problem is timed by the host clock: its timing holds the whole host, GPUs or not."""
    return problem.spec.device != "cuda"


def ignore_event(event: LeaseEvent) -> None:
    pass


class Executor(ABC):
    """Where a run's compiles and benchmarks run, and when. A benchmark is compile (filling the build
    cache), then the evaluation of what compiled; leases taken go to `on_event`."""

    def __init__(self) -> None:
        self.on_event: Callable[[LeaseEvent], None] = ignore_event

    @abstractmethod
    def compile(self, job: KernelJob) -> CompileResult: ...

    @abstractmethod
    def evaluate_compiled(self, job: KernelJob, seed: int | None) -> BenchResult: ...

    def benchmark(self, job: KernelJob, seed: int | None = None) -> BenchResult:
        """`seed` None: the evaluation draws one in secret (and may use truth made ahead for it)."""
        from tools.benchmark import needs_evaluation, not_compiled

        compiled = self.compile(job)
        if not needs_evaluation(compiled):
            return not_compiled(job.problem, job.code, compiled)
        return self.evaluate_compiled(job, seed)

    def warm_up(self, problem: Problem) -> None:
        """The run starts: make its first evaluation's worker and truth now, while the model writes the
        kernel, where the executor can (default: nothing; each evaluation makes its own)."""
        del problem  # nothing made ahead by default

    def sanitize(self, job: KernelJob) -> SanitizerReport:
        """The sanitizer on a kernel (a run's new best) at the problem's smallest case, where the executor
        can run it (default: it cannot, and the report says so)."""
        from tools.judge import unavailable_report

        del job
        return unavailable_report(f"{type(self).__name__} does not run the sanitizer")

    def profile(self, job: KernelJob) -> ProfileResult:
        """Nsight Compute on a kernel: compiled first (its build then comes from the cache), then profiled
        where the executor can (default: it cannot, and the result says so). Where ncu cannot run (a CPU
        problem, no GPU or no ncu here) it says so at once, before any build."""
        from tools.profile_kernel import unavailable

        refused = unavailable(job.problem)
        if refused is not None:
            return refused
        compiled = self.compile(job)
        if not compiled.ok:
            status = compiled.status if compiled.status in ("compile_error", "import_error") else "failed"
            return ProfileResult(status=status, message=compiled.message, compile=compiled)
        return self.profile_compiled(job)

    def baselines(self, problem: Problem, result: BenchResult) -> BenchResult:
        """`result` with the baselines timed beside it, where the executor can (default: unchanged)."""
        del problem
        return result

    def profile_compiled(self, job: KernelJob) -> ProfileResult:
        del job
        return ProfileResult(status="unavailable", message=f"{type(self).__name__} does not run the profiler")

    @abstractmethod
    def kill_all(self) -> None:
        """Kill what is running now (Ctrl-C)."""

    @abstractmethod
    def close(self) -> None:
        """The run has ended: give back what the executor holds."""


class LeasedExecutor(Executor):
    """This machine: compiles on the CPU pool, evaluations one per GPU (or alone on the host)."""

    def __init__(self, leases: Leases, evaluator: Evaluator | None = None) -> None:
        super().__init__()
        self.leases = leases
        self.evaluator: Evaluator = evaluator or LocalEvaluator()
        self._building: dict[str, threading.Lock] = {}
        self._building_lock = threading.Lock()

    def compile(self, job: KernelJob) -> CompileResult:
        with self._same_code(job.code), self.leases.compile(self.on_event, job.trajectory, job.kernel_path):
            return self.evaluator.compile(job.problem, job.code, job.on_progress)

    def _same_code(self, code: str) -> threading.Lock:
        """One lock per kernel source: identical code compiles once at a time (then from the cache)."""
        key = hashlib.sha256(code.encode()).hexdigest()
        with self._building_lock:
            return self._building.setdefault(key, threading.Lock())

    def evaluate_compiled(self, job: KernelJob, seed: int | None) -> BenchResult:
        with self.leases.timing(self.on_event, job.trajectory, job.kernel_path, on_host(job.problem)) as gpu:
            return self.evaluator.evaluate(job.problem, job.code, gpu, seed=seed)

    def sanitize(self, job: KernelJob) -> SanitizerReport:
        """Under a timing lease: the sanitizer holds the GPU (or, on a CPU problem, the host) as timing does."""
        run = getattr(self.evaluator, "sanitize", None)  # an evaluator may not sanitize
        if run is None:
            return super().sanitize(job)
        with self.leases.timing(self.on_event, job.trajectory, job.kernel_path, on_host(job.problem)) as gpu:
            report: SanitizerReport = run(job.problem, job.code, gpu)
            return report

    def profile_compiled(self, job: KernelJob) -> ProfileResult:
        """Under a timing lease: ncu's replays hold the GPU as timing does."""
        run = getattr(self.evaluator, "profile", None)  # an evaluator may not profile
        if run is None:
            return super().profile_compiled(job)
        with self.leases.timing(self.on_event, job.trajectory, job.kernel_path, on_host(job.problem)) as gpu:
            result: ProfileResult = run(job.problem, job.code, gpu)
            return result

    def baselines(self, problem: Problem, result: BenchResult) -> BenchResult:
        """Under a timing lease, as any timing (tools/judge/_baselines.py)."""
        from tools.judge import baselines

        with self.leases.timing(self.on_event, None, "baselines") as gpu:
            return baselines(problem, result, gpu=gpu)

    def warm_up(self, problem: Problem) -> None:
        """Each GPU the run times on (or the host) prepares its first evaluation, if the evaluator can."""
        prepare = getattr(self.evaluator, "prepare_ahead", None)  # an evaluator may make nothing ahead
        if prepare is None:
            return
        pool = self.leases.gpu_pool
        for gpu in pool.gpus if pool and not on_host(problem) else [None]:
            prepare(problem, gpu)

    def kill_all(self) -> None:
        self.evaluator.kill_all()

    def close(self) -> None:
        pass  # the leases live as long as the executor; nothing to give back
