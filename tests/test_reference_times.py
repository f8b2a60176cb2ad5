"""The reference-time cache serves only steady medians: a noisy one is timed again, not reused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import TINY
from tools.cache.reference_times import MAX_CACHED_REFERENCE_RSE, WINDOWS, ReferenceTimes
from tools.envinfo import collect_env
from tools.problem import load_problem
from tools.results import TimingStats


def stats(rse: float) -> TimingStats:
    return TimingStats(median_ms=100.0, rse=rse, n=3, min_ms=50.0, max_ms=900.0, mean_ms=300.0, clock="host")


def test_a_noisy_reference_median_is_not_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    problem = load_problem(TINY)
    shape = problem.primary
    refs = ReferenceTimes(problem, collect_env(problem))
    refs.put(shape, stats(0.81))  # seen: 3 samples on a loaded 2-core host
    assert ReferenceTimes(problem, collect_env(problem)).get(shape) is None
    refs.put(shape, stats(MAX_CACHED_REFERENCE_RSE / 4))
    served = ReferenceTimes(problem, collect_env(problem)).get(shape)
    assert served is not None
    assert served.median_ms == 100.0


def test_a_median_timed_ahead_on_a_busy_host_or_unsteadily_does_not_serve() -> None:
    """What decides whether a run's first evaluation uses the reference medians its truth timed ahead
    (tools/judge/_ahead.py `prefetch_usable`): steady and quiet only."""
    from tools.cache.reference_times import servable

    steady = stats(MAX_CACHED_REFERENCE_RSE / 4)
    assert servable(steady)
    assert not servable(steady.model_copy(update={"busy_elsewhere": 1.0}))
    assert not servable(stats(MAX_CACHED_REFERENCE_RSE * 2))
    assert not servable(None)


def test_the_final_recheck_compares_against_the_reference_median_the_run_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The final re-check times candidates with twice the repetitions; timing the reference again at every
    shape cost the H200 gate's 2-turn run 55 s and ranks nothing differently. A different reference does
    get its own entry."""
    from agent.toolbox import more_repetitions

    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    problem = load_problem(TINY)
    longer = more_repetitions(problem)
    assert longer.content_hash != problem.content_hash
    assert longer.reference_hash == problem.reference_hash
    shape = problem.primary
    ReferenceTimes(problem, collect_env(problem)).put(shape, stats(0.02))
    served = ReferenceTimes(longer, collect_env(longer)).get(shape)
    assert served is not None
    assert served.median_ms == 100.0
    other = problem.model_copy(update={"reference_source": problem.reference_source + "\n# changed\n"})
    assert other.reference_hash != problem.reference_hash
    assert ReferenceTimes(other, collect_env(other)).get(shape) is None


def test_windows_written_by_many_threads_at_once_are_all_kept_to_the_last_nine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every paired check on a GPU adds a window, and the trajectories of a parallel run check at once: no
    write may fail or lose the file (one temporary file for all writers once raced)."""
    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(tmp_path))
    problem = load_problem(TINY)
    env = collect_env(problem)
    quiet = TimingStats(median_ms=1.0, rse=0.01, n=5, min_ms=1.0, max_ms=1.0, mean_ms=1.0, busy_elsewhere=0.0)

    def add(start: int) -> None:
        refs = ReferenceTimes(problem, env)
        for i in range(20):
            refs.add_window(problem.primary, quiet.model_copy(update={"median_ms": float(start + i)}))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(add, range(0, 800, 100)))
    windows = ReferenceTimes(problem, env).windows(problem.primary)
    assert len(windows) == WINDOWS
    assert all(w % 100 < 20 for w in windows)
    assert not list(tmp_path.glob("*.tmp"))
