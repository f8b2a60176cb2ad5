"""Where compiles and evaluations run, for one run with any number of trajectories.

Two layers:
- an `Evaluator` does one compile or one evaluation: `compile(problem, code)` and
  `evaluate(problem, code, gpu)`. `LocalEvaluator` calls the harness's public API (tools.compile_kernel,
  tools.benchmark), whose child processes do the isolation; a warm-worker evaluator fits the same protocol.
- an `Executor` decides when and where: `LeasedExecutor` (this machine: a compile slot, then a timing
  lease, see agent.leases) or `agent.ray_executor.RayExecutor` (a Ray cluster's resources do the leasing).

A benchmark is always compile-then-time: the compile runs under a compile lease and fills the
content-keyed build cache, so the evaluation's own import is a cache hit and the timing lease is held for
the evaluation only. A kernel that does not compile is not timed at all. Two trajectories compiling the
same code (samples of one scripted playback, say) build it once: the second waits, then hits the cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

from agent.events import LeaseEvent
from agent.leases import Leases
from tools.problem import Problem
from tools.results import BenchResult, CompileResult


class Evaluator(Protocol):
    def compile(self, problem: Problem, code: str) -> CompileResult: ...

    def evaluate(
        self, problem: Problem, code: str, gpu: int | None, seed: int | None = None
    ) -> BenchResult: ...

    def kill_all(self) -> None: ...


class LocalEvaluator:
    """The harness's own entry points, in this process (each spawns its isolated child processes)."""

    def compile(self, problem: Problem, code: str) -> CompileResult:
        from tools.judge import compile_kernel

        return compile_kernel(problem, code)

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        from tools.judge import benchmark

        return benchmark(problem, code, seed, gpu=gpu)

    def kill_all(self) -> None:
        from tools.supervise import kill_all_children

        kill_all_children()


class Executor(Protocol):
    on_event: Callable[[LeaseEvent], None]

    def compile(
        self, problem: Problem, code: str, trajectory: int | None = None, kernel_path: str | None = None
    ) -> CompileResult: ...

    def benchmark(
        self,
        problem: Problem,
        code: str,
        trajectory: int | None = None,
        seed: int | None = None,
        kernel_path: str | None = None,
    ) -> BenchResult: ...

    def kill_all(self) -> None: ...

    def close(self) -> None: ...


def not_compiled(problem: Problem, compiled: CompileResult) -> BenchResult:
    """The benchmark's verdict on a kernel whose compile failed (what benchmark() itself would say)."""
    return BenchResult(
        status=compiled.status,
        correct=False,
        speedup=None,
        message=compiled.message,
        compile=compiled,
        problem=problem.name,
        problem_hash=problem.content_hash,
        kernel_hash=compiled.kernel_hash,
        output=compiled.output,
    )


def needs_timing(compiled: CompileResult) -> bool:
    return compiled.ok or compiled.status == "no_device"


def ignore_event(event: LeaseEvent) -> None:
    pass


class LeasedExecutor:
    """This machine: compiles on the CPU pool, evaluations one per GPU (or alone on the host)."""

    def __init__(self, leases: Leases, evaluator: Evaluator | None = None) -> None:
        self.leases = leases
        self.evaluator: Evaluator = evaluator or LocalEvaluator()
        self.on_event: Callable[[LeaseEvent], None] = ignore_event
        self._building: dict[str, threading.Lock] = {}
        self._building_lock = threading.Lock()

    def compile(
        self, problem: Problem, code: str, trajectory: int | None = None, kernel_path: str | None = None
    ) -> CompileResult:
        with self._same_code(code), self.leases.compile(self.on_event, trajectory, kernel_path):
            return self.evaluator.compile(problem, code)

    def _same_code(self, code: str) -> threading.Lock:
        """One lock per kernel source: identical code compiles once at a time (then from the cache)."""
        key = hashlib.sha256(code.encode()).hexdigest()
        with self._building_lock:
            return self._building.setdefault(key, threading.Lock())

    def benchmark(
        self,
        problem: Problem,
        code: str,
        trajectory: int | None = None,
        seed: int | None = None,
        kernel_path: str | None = None,
    ) -> BenchResult:
        compiled = self.compile(problem, code, trajectory, kernel_path)
        if not needs_timing(compiled):
            return not_compiled(problem, compiled)
        with self.leases.timing(self.on_event, trajectory, kernel_path) as gpu:
            return self.evaluator.evaluate(problem, code, gpu, seed=seed)

    def kill_all(self) -> None:
        self.evaluator.kill_all()

    def close(self) -> None:
        pass


def loop_evaluator(executor: Executor, trajectory: int | None) -> Any:
    """The agent loop's `Evaluator` (agent.loop) for one trajectory, going through `executor`."""
    from agent.loop import Evaluator as LoopEvaluator

    def benchmark(problem: Problem, code: str, seed: int | None = None, **_: Any) -> BenchResult:
        return executor.benchmark(problem, code, trajectory, seed=seed)

    return LoopEvaluator(
        compile=lambda problem, code: executor.compile(problem, code, trajectory),
        benchmark=benchmark,
        kill_all_children=executor.kill_all,
    )
