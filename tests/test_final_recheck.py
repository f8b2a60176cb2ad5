"""The final re-check: which kernels it measures again, fastest first, and which it may skip."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal, cast

import pytest

from agent.best import Standings, could_overtake, final_recheck
from agent.execution.executor import KernelJob
from agent.run_setup import RunSetup
from agent.runlog.events import BestRecord, Event, TimedKernel, ToolCallEvent
from tools.problem import Problem
from tools.results import BenchResult, ShapeTiming, TimingStats


def kernel(turn: int, ms: float) -> TimedKernel:
    return TimedKernel(
        turn=turn, kernel_path=f"kernels/{turn:03d}.py", speedup=100.0 / ms, median_ms=ms, rse=0.01
    )


def result(
    ms: float | None, spread: float = 1.05, clock: Literal["host", "cuda_event"] = "host"
) -> BenchResult:
    """ok at `ms` on the primary shape, its speedup interval `spread` (high / low) wide, or (None) incorrect
    under the re-check's fresh seed."""
    if ms is None:
        return BenchResult(status="incorrect", correct=False, speedup=None, message="1 of 6 cases failed")
    stats = TimingStats(median_ms=ms, rse=0.01, n=20, min_ms=ms, max_ms=ms, mean_ms=ms, clock=clock)
    interval = (100.0 / ms / spread**0.5, 100.0 / ms * spread**0.5)
    timing = ShapeTiming(
        name="s", primary=True, sizes={}, candidate=stats, speedup=100.0 / ms, speedup_interval=interval
    )
    return BenchResult(status="ok", correct=True, speedup=100.0 / ms, message="ok", timings=[timing])


class Rechecker:
    """An executor whose re-checks of each kernel (by its code) give the results it was told to, in turn
    (the last one again once they run out)."""

    def __init__(self, results: dict[str, BenchResult | list[BenchResult]]) -> None:
        self.results = {k: v if isinstance(v, list) else [v] for k, v in results.items()}
        self.measured: list[str] = []

    def benchmark(self, job: KernelJob, seed: int | None = None) -> BenchResult:
        self.measured.append(job.kernel_path)
        queue = self.results[job.code]
        return queue.pop(0) if len(queue) > 1 else queue[0]


class Log:
    def __init__(self, run_dir: Path) -> None:
        self.dir, self.best = run_dir, None

    def write_best(self, record: BestRecord) -> None:
        self.best = record

    def remove_best(self) -> None:
        self.best = None


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.phases: list[str] = []

    def record(self, event: Event) -> None:
        self.events.append(event)

    def set_phase(self, phase: str) -> None:
        self.phases.append(phase)


def recheck(
    tmp_path: Path,
    tiny: Problem,
    timed: list[TimedKernel],
    rechecked: Sequence[float | None | BenchResult | list[BenchResult]],
    recorder: Recorder | None = None,
) -> tuple[list[str], BestRecord | None]:
    """Run the final re-check over kernels timed as `timed`, which re-check as `rechecked` (same order):
    a time, a result or the results of its re-checks in turn."""
    (tmp_path / "kernels").mkdir()
    for k in timed:
        (tmp_path / k.kernel_path).write_text(k.kernel_path)
    given = [r if isinstance(r, BenchResult | list) else result(r) for r in rechecked]
    executor = Rechecker({k.kernel_path: r for k, r in zip(timed, given, strict=True)})
    log = Log(tmp_path)
    setup = cast(
        RunSetup, type("Setup", (), {"problem": tiny, "log": log, "executor": executor, "sanitizer": None})()
    )
    standings = Standings(best=min(timed, key=lambda k: k.median_ms), candidates=timed)
    final_recheck(standings, setup, recorder or Recorder(), turn=5)
    assert standings.recheck_seconds > 0  # counted in the run's time split (summary.json)
    return executor.measured, log.best


def test_a_kernel_timed_well_behind_the_rechecked_best_is_not_measured_again(
    tmp_path: Path, tiny: Problem
) -> None:
    """H200 gate, 2026-12-01: 2.134 ms re-checked at 2.120; 2.639 ms (0.81 of the speedup, within the
    shortlist's 0.75) was measured again for 17 s and could not have won."""
    fast, slow = kernel(1, 2.134), kernel(2, 2.639)
    measured, best = recheck(tmp_path, tiny, [fast, slow], [2.120, 2.536])
    assert measured == ["kernels/001.py"]
    assert best is not None
    assert (best.kernel_path, best.final, best.median_ms) == ("kernels/001.py", True, 2.120)


def test_a_close_runner_up_is_measured_and_can_win(tmp_path: Path, tiny: Problem) -> None:
    fast, close = kernel(1, 1.00), kernel(2, 1.05)
    measured, best = recheck(tmp_path, tiny, [fast, close], [1.04, 1.02])
    assert measured == ["kernels/001.py", "kernels/002.py"]
    assert best is not None
    assert best.kernel_path == "kernels/002.py"


def test_when_the_fastest_fails_under_fresh_seeds_the_next_is_measured(tmp_path: Path, tiny: Problem) -> None:
    fast, slow = kernel(1, 1.0), kernel(2, 1.3)
    measured, best = recheck(tmp_path, tiny, [fast, slow], [None, 1.31])
    assert measured == ["kernels/001.py", "kernels/002.py"]
    assert best is not None
    assert best.kernel_path == "kernels/002.py"


def test_could_overtake_is_a_margin_on_the_rechecked_time() -> None:
    winner = kernel(1, 2.0)
    assert could_overtake(kernel(2, 5.0), None)
    assert could_overtake(kernel(2, 2.19), winner)
    assert not could_overtake(kernel(2, 2.21), winner)


def test_the_live_line_names_the_kernel_being_rechecked(tmp_path: Path, tiny: Problem) -> None:
    recorder = Recorder()
    recheck(tmp_path, tiny, [kernel(1, 1.0), kernel(2, 1.05)], [1.0, 1.04], recorder)
    assert recorder.phases == ["rechecking kernels/001.py (1 of 2)", "rechecking kernels/002.py (2 of 2)"]


def test_no_further_kernel_is_rechecked_past_the_budget_once_one_stands(
    tmp_path: Path, tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.best

    monkeypatch.setattr(agent.best, "RECHECK_BUDGET_S", 0.0)
    measured, best = recheck(tmp_path, tiny, [kernel(1, 1.0), kernel(2, 1.05)], [1.0, 1.04])
    assert measured == ["kernels/001.py"]
    assert best is not None


def test_past_the_budget_a_failed_fastest_still_leaves_the_next_to_be_measured(
    tmp_path: Path, tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.best

    monkeypatch.setattr(agent.best, "RECHECK_BUDGET_S", 0.0)
    measured, best = recheck(tmp_path, tiny, [kernel(1, 1.0), kernel(2, 1.3)], [None, 1.3])
    assert measured == ["kernels/001.py", "kernels/002.py"]
    assert best is not None


def test_a_recheck_too_wide_to_rank_is_measured_once_more_and_the_narrower_kept(
    tmp_path: Path, tiny: Problem
) -> None:
    """CI's machine once re-checked a 1.27x kernel at 0.86x, slow for most of its calls; its interval, now
    widened by the slow stretch, is too wide to rank: measured again, the steady one is the best's."""
    slowed, steady = result(318.8, spread=1.8), result(215.0, spread=1.1)
    recorder = Recorder()
    measured, best = recheck(tmp_path, tiny, [kernel(3, 215.0)], [[slowed, steady]], recorder)
    assert measured == ["kernels/003.py", "kernels/003.py"]
    assert best is not None
    assert best.median_ms == 215.0
    assert recorder.phases[-1] == "rechecking kernels/003.py again: too wide to rank (1 of 1)"
    ids = [e.tool_use_id for e in recorder.events if isinstance(e, ToolCallEvent)]
    assert ids == ["final-recheck-1", "final-recheck-1-again"]


def test_a_narrow_recheck_is_not_measured_again_and_a_wider_second_one_is_not_kept(
    tmp_path: Path, tiny: Problem
) -> None:
    measured, _ = recheck(tmp_path, tiny, [kernel(1, 1.0)], [[result(1.0), result(0.5)]])
    assert measured == ["kernels/001.py"]
    (tmp_path / "again").mkdir()
    wide, wider = result(1.0, spread=1.5), result(0.5, spread=2.0)
    measured, best = recheck(tmp_path / "again", tiny, [kernel(1, 1.0)], [[wide, wider]])
    assert measured == ["kernels/001.py"] * 2
    assert best is not None
    assert best.median_ms == 1.0


def test_a_recheck_found_wrong_when_measured_again_is_no_candidate(tmp_path: Path, tiny: Problem) -> None:
    measured, best = recheck(tmp_path, tiny, [kernel(1, 1.0)], [[result(1.0, spread=1.5), result(None)]])
    assert measured == ["kernels/001.py"] * 2
    assert best is None


def test_on_a_devices_clock_a_wide_recheck_is_not_measured_again(tmp_path: Path, tiny: Problem) -> None:
    """There the width is the reference's windows, the same for every kernel: a second measurement of the
    candidate cannot narrow it."""
    wide = result(1.0, spread=1.5, clock="cuda_event")
    measured, best = recheck(tmp_path, tiny, [kernel(1, 1.0)], [[wide, result(1.0, clock="cuda_event")]])
    assert measured == ["kernels/001.py"]
    assert best is not None


def test_past_the_budget_a_wide_recheck_is_not_measured_again(
    tmp_path: Path, tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agent.best

    monkeypatch.setattr(agent.best, "RECHECK_BUDGET_S", -1.0)
    measured, best = recheck(tmp_path, tiny, [kernel(1, 1.0)], [[result(1.0, spread=1.5), result(1.0)]])
    assert measured == ["kernels/001.py"]
    assert best is not None
