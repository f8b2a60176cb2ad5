"""bench/throughput.py's accounting: a warm-up's evaluations (each trajectory's truth server starting) are
neither counted nor timed, and fresh builds warm up on build keys of their own."""

from __future__ import annotations

import sys
import threading

from agent.execution.executor import Executor, KernelJob
from agent.runlog.events import LeaseEvent
from tests.helpers import REPO
from tools.problem import load_problem
from tools.results import BenchResult, CompileResult

sys.path.insert(0, str(REPO))
from bench import throughput  # noqa: E402

PROBLEM = load_problem(REPO / "problems" / "selective_scan_cpu.yaml")


class Recording(Executor):
    """Evaluates nothing: records which code each trajectory benchmarked, and reports one lease an
    evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int | None, str]] = []
        self._lock = threading.Lock()

    def compile(self, job: KernelJob) -> CompileResult:
        raise AssertionError("benchmark is overridden")

    def evaluate_compiled(self, job: KernelJob, seed: int | None) -> BenchResult:
        raise AssertionError("benchmark is overridden")

    def kill_all(self) -> None:
        """Nothing runs."""

    def close(self) -> None:
        """Nothing to stop."""

    def benchmark(self, job: KernelJob, seed: int | None = None) -> BenchResult:
        with self._lock:
            self.seen.append((job.trajectory, job.code))
        held = 5.0 if job.code.startswith("w") else 1.0  # a warm-up's evaluations hold longer
        self.on_event(
            LeaseEvent(
                action="released",
                lease_id=job.code,
                kind="timing",
                resource="host",
                trajectory=job.trajectory,
                held_s=held,
            )
        )
        return BenchResult(status="ok", correct=True, speedup=1.0, message="ok", seconds=0.01)


def test_a_warm_up_is_neither_counted_nor_timed() -> None:
    executor = Recording()
    codes, warm = ["a", "b", "c"], ["w1", "w2", "w3", "w4"]
    row = throughput.measure(
        PROBLEM, executor, 2, codes, minutes=1.0, think=0.0, warm_up_rounds=2, warm_codes=warm
    )
    warmed = [code for _, code in executor.seen[:4]]
    assert set(warmed) <= set(warm)
    assert sorted(code for _, code in executor.seen[4:]) == codes
    assert (row["candidates"], row["correct"], row["warm_up_rounds"]) == (3, 3, 2)
    assert row["timing_held_s"] == 1.0  # only the counted evaluations' leases are averaged


def test_without_a_warm_up_every_evaluation_counts() -> None:
    executor = Recording()
    row = throughput.measure(PROBLEM, executor, 1, ["a", "b"], minutes=1.0, think=0.0)
    assert [code for _, code in executor.seen] == ["a", "b"]
    assert (row["candidates"], row["warm_up_s"]) == (2, 0.0)


def test_fresh_builds_warm_up_on_build_keys_of_their_own() -> None:
    measured = throughput.candidates(PROBLEM, 4, "t-n2")
    warm = throughput.candidates(PROBLEM, 4, "t-n2-warm-up")
    assert not set(measured) & set(warm)
