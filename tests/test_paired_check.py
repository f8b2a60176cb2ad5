"""The paired check (tools/judge/_paired.py): a cached reference median sets a speedup only while the
reference, timed again briefly beside the candidate, agrees with it. Real workers, the tiny CPU problem."""

from __future__ import annotations

import math

import pytest

from tests.candidates import scan_variants as v
from tools import benchmark
from tools.cache.reference_times import MAX_CACHED_REFERENCE_RSE, ReferenceTimes
from tools.judge._paired import agrees
from tools.judge._ratio import speedup_interval
from tools.problem import Problem
from tools.results import BenchResult, TimingStats
from tools.supervise import WarmPool


def stats(ms: float, rse: float = 0.01, low: float | None = None, high: float | None = None) -> TimingStats:
    low, high = low or ms * (1 - 2 * rse), high or ms * (1 + 2 * rse)
    return TimingStats(median_ms=ms, rse=rse, n=5, min_ms=low, max_ms=high, mean_ms=ms)


def test_a_cached_median_agrees_within_ten_percent_or_the_two_spreads() -> None:
    assert agrees(stats(100.0), stats(109.0))
    assert not agrees(stats(100.0), stats(115.0))
    assert agrees(stats(100.0, rse=0.03), stats(115.0, rse=0.03, low=100.0))  # 3 x (3 % + 3 %) = 18 %
    assert not agrees(stats(500.0), stats(100.0))  # the cache from a loaded host, 5x slower


def test_a_noisy_check_still_refutes_a_median_outside_every_call_it_made() -> None:
    """Seen on this 2-core machine under load: a check at 51 % RSE allowed any drift by its spread."""
    loaded = stats(35.8, rse=0.51, low=3.3, high=70.3)
    assert not agrees(stats(110.0), loaded)  # above its slowest call by more than 10 %
    assert agrees(stats(40.0), loaded)


def test_the_drift_between_two_windows_widens_the_interval_on_both_sides() -> None:
    ref, cand = stats(100.0, rse=0.01), stats(25.0, rse=0.01)
    narrow, wide = speedup_interval(ref, cand), speedup_interval(ref, cand, drift=0.08)
    assert narrow is not None
    assert wide is not None
    assert narrow[0] < 4.0 < narrow[1]
    assert wide[0] == pytest.approx(narrow[0] * math.exp(-0.08))
    assert wide[1] == pytest.approx(narrow[1] * math.exp(0.08))


def contains_its_speedup(result: BenchResult) -> bool:
    """The interval a result shows is the one of the ratio it reports (seen on this machine before the fix:
    3.85x shown with [4.28, 4.87], the interval of the cached median the check had replaced)."""
    primary = result.primary_timing
    assert primary is not None
    assert primary.speedup is not None
    assert primary.speedup_interval is not None
    low, high = primary.speedup_interval
    return low <= primary.speedup <= high


def cache_reference(tiny: Problem, warm: WarmPool, scale: float = 1.0) -> TimingStats:
    """The reference's median on this host, cached (times `scale`) with a spread steady enough to be
    served: a median cached on a loaded machine (RSE over 20 %) is not, and then nothing is checked."""
    first = benchmark(tiny, v.baseline(), pool=warm)
    assert first.status == "ok", first.message
    assert first.primary_timing is not None
    measured = first.primary_timing.reference
    assert measured is not None
    cached = measured.model_copy(update={"median_ms": measured.median_ms * scale, "rse": 0.01})
    ReferenceTimes(tiny, first.env).put(tiny.primary, cached)
    return measured


def test_a_cached_reference_is_checked_beside_the_candidate(tiny: Problem, warm: WarmPool) -> None:
    cache_reference(tiny, warm)
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    primary = result.primary_timing
    assert primary is not None
    assert primary.reference_check is not None  # timed now, a few calls
    assert primary.reference_check.n >= 5
    assert result.phases["reference_check"] > 0
    assert primary.reference is not None
    assert contains_its_speedup(result)
    if primary.reference_cached:  # it agreed: the cached median stands, the interval widened by the drift
        assert agrees(primary.reference, primary.reference_check)
        assert primary.candidate is not None
        drift = math.log(primary.reference_check.median_ms / primary.reference.median_ms)
        assert primary.speedup_interval == speedup_interval(primary.reference, primary.candidate, drift)
    else:  # a loaded machine moved the reference: the result says so
        assert any("disagreed" in n for n in result.notices), result.notices


def test_a_cached_median_from_other_conditions_gives_way_to_the_reference_timed_now(
    tiny: Problem, warm: WarmPool
) -> None:
    """A reference median cached while the host was loaded (here: written 5x too slow) would make every
    later speedup 5x too high; the check's median replaces it, for this result and in the cache."""
    honest = cache_reference(tiny, warm, scale=5.0)
    shape = tiny.primary
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    primary = result.primary_timing
    assert primary is not None
    assert primary.reference_check is not None
    assert primary.reference is primary.reference_check or primary.reference == primary.reference_check
    assert not primary.reference_cached
    assert primary.reference.median_ms < honest.median_ms * 2.5  # not the tampered 5x
    assert primary.candidate is not None
    assert result.speedup == pytest.approx(primary.reference.median_ms / primary.candidate.median_ms)
    assert primary.speedup_interval == speedup_interval(primary.reference, primary.candidate)
    assert contains_its_speedup(result)
    assert any("disagreed" in n for n in result.notices), result.notices
    served = ReferenceTimes(tiny, result.env).get(shape)
    if primary.reference_check.rse <= MAX_CACHED_REFERENCE_RSE:  # steady enough: it replaces the cached one
        assert served == primary.reference_check
    else:  # a check on a loaded machine is used for this result only
        assert served is not None
        assert served.median_ms == pytest.approx(honest.median_ms * 5)
