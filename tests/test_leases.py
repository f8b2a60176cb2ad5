"""Leases without builds: many threads through `LeasedExecutor`, the overlap check on the lease events.

The evaluator here runs a real child process for each compile and evaluation (`sleep`), so the threads
really wait on each other; what is checked is what the run log would say (agent.runlog.reader's spans).
"""

from __future__ import annotations

import concurrent.futures as cf
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.execution.executor import KernelJob, LeasedExecutor
from agent.execution.leases import Leases
from agent.runlog.data import LeaseSpan, lease_spans, overlapping_leases
from agent.runlog.events import LeaseEvent
from tests.helpers import TINY
from tools.problem import Problem, load_problem
from tools.results import BenchResult, CompileResult
from tools.supervise import (
    EVALS_ENV,
    EVALUATIONS_PER_GPU,
    DeviceTurns,
    SharedExclusiveLock,
    evaluations_per_gpu,
)


def on_device(problem: Problem, gpus: list[int] | None) -> Problem:
    """The tiny problem as the leases see it: a CUDA problem where they hold GPUs (a CPU problem's timing
    holds the host whatever GPUs there are), else the CPU problem it is."""
    if not gpus:
        return problem
    return problem.model_copy(update={"spec": problem.spec.model_copy(update={"device": "cuda"})})


class SleepEvaluator:
    """Each call is one child process that sleeps; `evaluate` notes the GPU it was given."""

    def __init__(self, seconds: float = 0.15) -> None:
        self.seconds = seconds
        self.gpus: list[int | None] = []

    def compile(self, problem: Problem, code: str, on_progress: object = None) -> CompileResult:
        subprocess.run(["sleep", str(self.seconds)], check=True)
        status = "compile_error" if "broken" in code else "ok"
        return CompileResult(status=status, message=status, kernel_hash=code[:8])

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        self.gpus.append(gpu)
        subprocess.run(["sleep", str(self.seconds)], check=True)
        return BenchResult(status="ok", correct=True, speedup=1.0, message="ok")

    def kill_all(self) -> None:
        pass


def hammer(executor: LeasedExecutor, trajectories: int, per_trajectory: int) -> list[LeaseEvent]:
    events: list[LeaseEvent] = []
    executor.on_event = events.append
    pool = executor.leases.gpu_pool
    problem = on_device(load_problem(TINY), pool.gpus if pool else None)

    def trajectory(k: int) -> None:
        for i in range(per_trajectory):
            executor.benchmark(KernelJob(problem, f"kernel {k}-{i}", trajectory=k))

    with cf.ThreadPoolExecutor(trajectories) as pool:
        list(pool.map(trajectory, range(1, trajectories + 1)))
    return events


def overlaps_any(spans: list[LeaseSpan], a_kind: str, b_kind: str, different_resource: bool = False) -> bool:
    return any(
        a.kind == a_kind
        and b.kind == b_kind
        and a is not b
        and (not different_resource or a.resource != b.resource)
        and a.acquired < (b.released or a.acquired)
        and b.acquired < (a.released or b.acquired)
        for a in spans
        for b in spans
    )


def test_gpu_timings_never_share_a_gpu_and_spread_over_all() -> None:
    evaluator = SleepEvaluator()
    executor = LeasedExecutor(Leases(gpus=[0, 1], compile_slots=4, per_gpu=1), evaluator)
    spans = lease_spans(hammer(executor, trajectories=4, per_trajectory=3))
    assert len(spans) == 24
    assert all(s.released is not None for s in spans)
    assert overlapping_leases(spans, cpu_problem=False) == []
    assert {s.resource for s in spans if s.kind == "timing"} == {"gpu0", "gpu1"}
    assert set(evaluator.gpus) == {0, 1}
    assert overlaps_any(spans, "timing", "timing", different_resource=True), (
        "the two GPUs never worked at once"
    )


class TurnsEvaluator(SleepEvaluator):
    """An evaluation as the warm path makes one: shared (truth, cases), exclusive (the timed loop), shared
    (the re-check), on one device lock per GPU (tools/supervise/locks.py)."""

    def __init__(self) -> None:
        super().__init__(0.1)
        self.locks = {0: SharedExclusiveLock()}

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        assert gpu is not None
        turns = DeviceTurns(self.locks[gpu])
        for mode in ("shared", "exclusive", "shared"):
            turns.to(mode)  # type: ignore[arg-type]
            subprocess.run(["sleep", str(self.seconds)], check=True)
        turns.close()
        return BenchResult(status="ok", correct=True, speedup=1.0, message="ok")


def test_two_evaluations_share_a_gpu_but_never_its_timed_loops() -> None:
    executor = LeasedExecutor(Leases(gpus=[0], compile_slots=4, per_gpu=2), TurnsEvaluator())
    events = hammer(executor, trajectories=3, per_trajectory=3)
    spans = lease_spans(events)
    timings = [s for s in spans if s.kind == "timing"]
    assert len(timings) == 9
    assert all(s.released is not None for s in timings)
    assert overlapping_leases(spans, cpu_problem=False) == []
    assert overlaps_any(spans, "evaluation", "evaluation"), "two evaluations never ran on the GPU at once"
    assert not any(  # never three at once: two a GPU
        a.acquired < (b.released or a.acquired) and b.acquired < (a.released or b.acquired)
        and b.acquired < (c.released or b.acquired) and c.acquired < (b.released or c.acquired)
        and a.acquired < (c.released or a.acquired) and c.acquired < (a.released or c.acquired)
        for a in spans for b in spans for c in spans
        if a.kind == b.kind == c.kind == "evaluation" and len({a.lease_id, b.lease_id, c.lease_id}) == 3
    )  # fmt: skip
    told = [e for e in events if e.kind == "timing"]
    assert {e.trajectory for e in told} == {1, 2, 3}
    assert all(e.resource == "gpu0" and e.kernel_path is None for e in told)


def test_a_gpu_takes_the_evaluations_the_environment_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVALS_ENV, raising=False)
    monkeypatch.delenv("KERNEL_AGENT_WARM", raising=False)
    assert evaluations_per_gpu() == EVALUATIONS_PER_GPU
    monkeypatch.setenv(EVALS_ENV, "3")
    pool = Leases(gpus=[0]).gpu_pool
    assert pool is not None
    assert pool.per_gpu == 3
    monkeypatch.setenv("KERNEL_AGENT_WARM", "0")  # the cold path has no device lock: one a GPU
    assert evaluations_per_gpu() == 1
    monkeypatch.delenv("KERNEL_AGENT_WARM")
    for bad in ("0", "two", "-1", "²"):
        monkeypatch.setenv(EVALS_ENV, bad)
        with pytest.raises(ValueError, match=EVALS_ENV):
            evaluations_per_gpu()


def test_cpu_timing_never_overlaps_a_compile() -> None:
    executor = LeasedExecutor(Leases(gpus=None, compile_slots=3), SleepEvaluator())
    spans = lease_spans(hammer(executor, trajectories=4, per_trajectory=3))
    assert {s.resource for s in spans if s.kind == "timing"} == {"host"}
    assert overlapping_leases(spans, cpu_problem=True) == []
    assert overlaps_any(spans, "compile", "compile"), "compiles never ran side by side"


def test_a_kernel_that_does_not_compile_is_not_timed() -> None:
    executor = LeasedExecutor(Leases(gpus=None), SleepEvaluator(0.01))
    events: list[LeaseEvent] = []
    executor.on_event = events.append
    result = executor.benchmark(KernelJob(load_problem(TINY), "broken kernel", trajectory=1))
    assert result.status == "compile_error"
    assert not result.correct
    assert {e.kind for e in events} == {"compile"}


def span(kind: str, resource: str, start: float, end: float | None) -> LeaseSpan:
    t0 = datetime(2026, 11, 29, tzinfo=UTC)
    released = t0 + timedelta(seconds=end) if end is not None else None
    return LeaseSpan(f"{kind}{start}", kind, resource, 1, t0 + timedelta(seconds=start), released)


@pytest.mark.parametrize(
    ("spans", "cpu_problem", "bad"),
    [
        ([span("timing", "gpu0", 0, 2), span("timing", "gpu0", 1, 3)], False, 1),
        ([span("timing", "gpu0", 0, 2), span("timing", "gpu1", 1, 3)], False, 0),
        ([span("timing", "gpu0", 0, 2), span("timing", "gpu0", 2, 3)], False, 0),
        ([span("timing", "gpu0", 0, None), span("timing", "gpu0", 5, 6)], False, 1),
        ([span("compile", "cpu", 0, 2), span("timing", "host", 1, 3)], True, 1),
        ([span("compile", "cpu", 0, 2), span("timing", "gpu0", 1, 3)], False, 0),
        ([span("compile", "cpu", 0, 2), span("compile", "cpu", 1, 3)], True, 0),
    ],
)
def test_the_overlap_check_finds_what_it_must(spans: list[LeaseSpan], cpu_problem: bool, bad: int) -> None:
    assert len(overlapping_leases(spans, cpu_problem)) == bad


def test_gpu_keyword_sets_the_childrens_visible_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.supervise import child_env, visible_gpu

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "CUDA_VISIBLE_DEVICES" not in child_env(tmp_path)
    with visible_gpu(1):
        assert child_env(tmp_path)["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # an index into what this process may use
    with visible_gpu(1):
        env = child_env(tmp_path)
        with cf.ThreadPoolExecutor(1) as pool:  # another thread's evaluations are not affected
            other = pool.submit(child_env, tmp_path).result()
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert other["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert child_env(tmp_path)["CUDA_VISIBLE_DEVICES"] == "4,5"


class PreparingEvaluator(SleepEvaluator):
    def __init__(self) -> None:
        super().__init__(0.0)
        self.prepared: list[int | None] = []

    def prepare_ahead(self, problem: Problem, gpu: int | None) -> None:
        self.prepared.append(gpu)


def test_a_run_starting_prepares_a_first_evaluation_on_every_gpu_it_times_on() -> None:
    problem = load_problem(TINY)
    on_gpus = PreparingEvaluator()
    LeasedExecutor(Leases(gpus=[0, 1]), on_gpus).warm_up(on_device(problem, [0, 1]))
    assert on_gpus.prepared == [0, 1]
    on_host = PreparingEvaluator()
    LeasedExecutor(Leases(gpus=None), on_host).warm_up(problem)
    assert on_host.prepared == [None]
    LeasedExecutor(Leases(gpus=None), SleepEvaluator()).warm_up(problem)  # one that makes nothing ahead
