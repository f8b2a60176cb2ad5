"""The problems of a suite run over one machine's leases, `jobs` at a time.

Each problem is one call of a `RunProblem` (a model run: agent/cli/suite.py makes it from `agent run`'s
own pieces; `--kernels`: agent.suite.kernels), given the suite's one `Leases`: every run's compiles share
the CPU pool, a CUDA problem's timings take any free GPU, a CPU problem's take the whole host, whichever
run they come from (agent.execution.leases). A result is written the moment its problem ends, so a suite
that is killed keeps every problem that ended, and `--resume` runs the rest.

Ctrl-C stops every run at once (each ends `Interrupted`, and is run again on `--resume`); problems not
started are left for `--resume`.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent.execution.executor import Evaluator, LeasedExecutor
from agent.execution.interrupts import ctrl_c_as_flag, wait_or_stop
from agent.execution.leases import Leases
from agent.suite.folder import write_result
from agent.suite.records import ProblemResult
from tools.problem import Problem


class Stops:
    """What ends the suite's runs at once: each run registers how to stop it; `stop_all` calls them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stoppers: list[Callable[[], None]] = []
        self.stopped = False

    def add(self, stopper: Callable[[], None]) -> None:
        with self._lock:
            self._stoppers.append(stopper)
            late = self.stopped
        if late:
            stopper()

    def stop_all(self) -> None:
        with self._lock:
            self.stopped = True
            stoppers = list(self._stoppers)
        for stopper in stoppers:
            stopper()


@dataclass
class SuiteContext:
    """What every run of a suite shares."""

    suite_dir: Path
    leases: Leases
    stops: Stops = field(default_factory=Stops)


class SuiteExecutor(LeasedExecutor):
    """A run's executor in a suite: the suite's leases, and nothing made ahead at the start (a run alone
    prepares its first evaluation on every GPU it times on; six problems on eight GPUs would hold 48
    workers, most never used)."""

    def __init__(self, context: SuiteContext, evaluator: Evaluator | None = None) -> None:
        super().__init__(context.leases, evaluator)

    def warm_up(self, problem: Problem) -> None:
        del problem  # each problem's first evaluation makes its own worker and truth


class RunProblem(Protocol):
    def __call__(self, problem: Problem, context: SuiteContext) -> ProblemResult: ...


Report = Callable[[str, Problem, ProblemResult | None], None]


def no_report(what: str, problem: Problem, result: ProblemResult | None) -> None:
    del what, problem, result


def interrupted_result(problem: Problem, message: str) -> ProblemResult:
    return ProblemResult(
        problem=problem.name,
        problem_path=str(problem.path),
        device=problem.spec.device,
        outcome="interrupted",
        exit_code=130,
        exit_status="Interrupted",
        message=message,
    )


def harness_error_result(problem: Problem, exc: BaseException) -> ProblemResult:
    return ProblemResult(
        problem=problem.name,
        problem_path=str(problem.path),
        device=problem.spec.device,
        outcome="harness_error",
        exit_code=3,
        exit_status="harness_error",
        message=f"{type(exc).__name__}: {exc}",
    )


def run_suite(
    problems: list[Problem],
    run_problem: RunProblem,
    context: SuiteContext,
    jobs: int,
    kill_all: Callable[[], None],
    report: Report = no_report,
) -> list[ProblemResult]:
    """Runs `problems` (those still to run), `jobs` at a time; returns the results that this call wrote."""

    def one(problem: Problem) -> ProblemResult | None:
        if context.stops.stopped:
            return None  # Ctrl-C before it started: left for --resume
        report("started", problem, None)
        try:
            result = run_problem(problem, context)
        except Exception as exc:  # a harness bug in one problem is that problem's result, not the suite's end
            result = harness_error_result(problem, exc)
        write_result(context.suite_dir, result)
        report("ended", problem, result)
        return result

    with ctrl_c_as_flag() as ctrl_c, cf.ThreadPoolExecutor(max(1, jobs), thread_name_prefix="suite") as pool:
        futures = [pool.submit(one, problem) for problem in problems]
        wait_or_stop(futures, ctrl_c, context.stops.stop_all, kill_all)
    return [r for f in futures if (r := f.result()) is not None]
