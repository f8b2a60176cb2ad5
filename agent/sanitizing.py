"""A run's sanitizer: a kernel about to become the best is first run under the sanitizer (compute-sanitizer
memcheck, racecheck and initcheck on CUDA problems; ASan and UBSan on CPU ones) at the problem's smallest
correctness case, through the run's executor; a finding makes its benchmark `incorrect`, so it never
becomes the best, and the model reads why in that benchmark's text.

One report per distinct kernel (the problem's reference and cases, the kernel's source hash): a kernel
benchmarked again, in this trajectory or another, reuses it (`cached`). Where the sanitizer cannot run here
(`agent run` decides at start, `unavailable`), each new best still carries a report that says so: never a
silent pass. The report rides on the benchmark's result, so the run log's tool-call event holds it, with
its seconds and budget.
"""

from __future__ import annotations

import hashlib
import threading

from agent.execution.executor import Executor, KernelJob
from tools.problem import Problem
from tools.results import BenchResult, SanitizerReport


def kernel_key(problem: Problem, code: str) -> str:
    return f"{problem.reference_hash}/{hashlib.sha256(code.encode()).hexdigest()[:16]}"


class RunSanitizer:
    """What a run's trajectories share of the sanitizer: its reports by kernel, one run of each at a time.
    `unavailable`: why it cannot run here ("" where it can)."""

    def __init__(self, unavailable: str = "") -> None:
        self.unavailable = unavailable
        self._reports: dict[str, SanitizerReport] = {}
        self._running: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def report(self, executor: Executor, job: KernelJob) -> SanitizerReport:
        """The kernel's report: made now (holding a timing lease), or the one made before."""
        from tools.judge import unavailable_report

        if self.unavailable:
            return unavailable_report(self.unavailable)
        key = kernel_key(job.problem, job.code)
        with self._lock:
            running = self._running.setdefault(key, threading.Lock())
        with running:  # the same kernel from two trajectories is sanitized once
            earlier = self._reports.get(key)
            if earlier is not None:
                return earlier.model_copy(update={"cached": True})
            try:
                made = executor.sanitize(job)
            except Exception as exc:  # the harness's fault, said as data; not kept: the next best tries again
                return unavailable_report(f"the sanitizer itself failed ({type(exc).__name__}: {exc})")
            self._reports[key] = made
            return made

    def vet(self, executor: Executor, job: KernelJob, result: BenchResult) -> BenchResult:
        """`result` (correct, about to become the best) with the sanitizer's verdict folded in."""
        from tools.judge import with_sanitizer

        return with_sanitizer(result, self.report(executor, job))
