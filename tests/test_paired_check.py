"""The paired check (tools/judge/_paired.py): a cached reference median sets a speedup only while the
reference, timed again briefly beside the candidate, agrees with it. Real workers, the tiny CPU problem."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from tests.candidates import scan_variants as v
from tools import benchmark
from tools.cache import cache_root
from tools.cache.reference_times import MAX_CACHED_REFERENCE_RSE, ReferenceTimes
from tools.figures import finish
from tools.judge import _paired
from tools.judge._paired import (
    FRESH_WINDOW_S,
    MIN_DRIFT,
    agrees,
    check_cached_reference,
    pooled_without_check,
    settle,
    slowed_by_host,
)
from tools.judge._ratio import speedup_interval, too_wide
from tools.problem import Problem
from tools.results import BenchResult, TimingStats
from tools.supervise import WarmPool


def stats(
    ms: float,
    rse: float = 0.01,
    low: float | None = None,
    high: float | None = None,
    clock: str = "cuda_event",
    busy: float | None = None,
) -> TimingStats:
    low, high = low or ms * (1 - 2 * rse), high or ms * (1 + 2 * rse)
    return TimingStats.model_validate(
        dict(
            median_ms=ms, rse=rse, n=5, min_ms=low, max_ms=high, mean_ms=ms, clock=clock, busy_elsewhere=busy
        )
    )


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


def test_a_median_near_zero_with_a_huge_spread_is_a_wide_interval_not_an_overflow() -> None:
    """`agent redteam`'s warmup-detector (most timed calls return a stored output at once) made the evaluator
    fail with OverflowError here: e^(1.96 x its spread) is past a float's range."""
    ref, cand = stats(1000.0, clock="host"), stats(1e-4, rse=5e6, low=5e-5, high=1500.0, clock="host")
    interval = speedup_interval(ref, cand)
    assert interval is not None
    assert all(math.isfinite(v) and v > 0 for v in interval)
    assert too_wide(interval)


def test_a_host_loop_slow_for_most_calls_widens_its_side_of_the_interval() -> None:
    """CI's machine, quiet by its meter: a CPU kernel's re-check read 318.8 ms over 86 calls, its fastest
    198.8 ms, where its other loops read 215-217 ms; the interval from the median's error alone (0.81-0.91x)
    missed the 1.27x the same kernel benched at. A slow stretch only adds time: the interval now reaches
    from the median to past the fastest call, on the slowed side only."""
    ref = stats(274.0, rse=0.01, low=270.0, clock="host")
    slowed = stats(318.8, rse=0.012, low=198.8, high=536.1, clock="host")
    low, high = speedup_interval(ref, slowed) or (0.0, 0.0)
    plain_low, plain_high = speedup_interval(ref, stats(318.8, rse=0.012, clock="host")) or (0.0, 0.0)
    assert low == pytest.approx(plain_low)  # the reference's loop was steady
    assert high > 1.27 > plain_high
    assert high == pytest.approx(plain_high * 318.8 / 198.8 / 1.10)
    # The reference's slow stretch widens the low side; a device's clock and a steady loop widen nothing.
    cand = stats(200.0, clock="host")
    ref_slowed = speedup_interval(stats(274.0, rse=0.01, low=150.0, clock="host"), cand) or (0.0, 0.0)
    ref_plain = speedup_interval(stats(274.0, rse=0.01, clock="host"), cand) or (0.0, 0.0)
    assert ref_slowed == pytest.approx((ref_plain[0] * 150.0 / 274.0 * 1.10, ref_plain[1]))
    on_device = speedup_interval(stats(274.0, low=150.0), stats(318.8, low=198.8))
    assert on_device == speedup_interval(stats(274.0), stats(318.8))
    steady = stats(205.4, rse=0.018, low=199.4, clock="host")  # this machine's bench: median/fastest 1.03
    assert speedup_interval(ref, steady) == speedup_interval(
        ref, stats(205.4, rse=0.018, low=205.4, clock="host")
    )


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
    # served: steady, and timed on a quiet host (here maybe not: then the cache would serve nothing)
    cached = measured.model_copy(
        update={"median_ms": measured.median_ms * scale, "rse": 0.01, "busy_elsewhere": 0.0}
    )
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
    check = primary.reference_check
    if check.rse <= MAX_CACHED_REFERENCE_RSE and not check.host_was_busy:  # it replaces the cached one
        assert served == check
    else:  # a check on a loaded machine is used for this result only
        assert served is not None
        assert served.median_ms == pytest.approx(honest.median_ms * 5)


def test_only_a_slower_device_clocked_check_on_a_busy_host_is_the_hosts_doing() -> None:
    cached = stats(70.0)
    assert slowed_by_host(
        cached, stats(100.0, busy=0.95)
    )  # H200 sweep: 72 ms cached, 100.6 ms beside 16 hogs
    assert not slowed_by_host(cached, stats(100.0, busy=0.05))  # a quiet host: the device's own window
    assert not slowed_by_host(cached, stats(50.0, busy=0.95))  # faster: the cache's window was the slow one
    assert not slowed_by_host(cached, stats(100.0, clock="host", busy=0.95))  # a CPU problem's clock


@pytest.fixture
def kept_cache(tiny: Problem) -> Iterator[None]:
    """The reference medians' cache as it was before the test (a check it settles may replace one)."""
    path = cache_root() / "reference_times.json"
    before = path.read_bytes() if path.is_file() else None
    yield
    if before is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(before)


def timed_against_cache(tiny: Problem, warm: WarmPool, reference: TimingStats) -> BenchResult:
    """A real result of the tiny problem whose primary shape divided `reference`, a cached median."""
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    timings = [t.model_copy() for t in result.timings]
    primary = next(t for t in timings if t.primary)
    assert primary.candidate is not None
    primary.candidate = primary.candidate.model_copy(update={"median_ms": 25.0, "rse": 0.01})
    primary.reference, primary.reference_cached = reference, True
    primary.speedup = primary.eager_speedup = (
        reference.median_ms / 25.0
    )  # on a CPU the launch-free is the eager
    return result.model_copy(update={"timings": timings, "speedup": primary.speedup, "notices": []})


def test_a_check_slowed_by_a_busy_host_leaves_the_cached_median_and_errs_low(
    tiny: Problem, warm: WarmPool, kept_cache: None
) -> None:
    """On the H200 a launch-bound reference checked beside 16 busy processes ran 1.4-2.5x slower while the
    candidate's device time did not move: dividing the check gave 208x where a quiet host gave 149x."""
    cached = stats(100.0)
    result = timed_against_cache(tiny, warm, cached)
    settled = finish(
        tiny, settle(tiny, result, stats(180.0, busy=0.96))
    )  # the headline's figures: tools/figures.py
    primary = settled.primary_timing
    assert primary is not None
    assert primary.reference_cached
    assert primary.reference == cached
    assert settled.speedup == pytest.approx(4.0)  # not 7.2
    assert primary.candidate is not None
    assert primary.speedup_interval == speedup_interval(cached, primary.candidate, math.log1p(MIN_DRIFT))
    assert contains_its_speedup(settled)
    assert any("busy" in n and "cached median" in n for n in settled.notices), settled.notices
    served = ReferenceTimes(tiny, settled.env).get(tiny.primary)
    assert served is None or served.median_ms != 180.0  # a loaded check is never cached


@pytest.mark.parametrize(
    "fresh",
    [stats(180.0, busy=0.05), stats(180.0, clock="host", busy=0.96), stats(50.0, busy=0.96)],
    ids=["quiet-host", "host-clock", "faster"],
)
def test_elsewhere_a_disagreeing_check_is_the_reference_paired_with_the_candidate(
    tiny: Problem, warm: WarmPool, fresh: TimingStats, kept_cache: None
) -> None:
    result = timed_against_cache(tiny, warm, stats(100.0))
    settled = finish(tiny, settle(tiny, result, fresh))  # the headline's figures: tools/figures.py
    primary = settled.primary_timing
    assert primary is not None
    assert not primary.reference_cached
    assert primary.reference == fresh
    assert settled.speedup == pytest.approx(fresh.median_ms / 25.0)
    assert contains_its_speedup(settled)
    assert primary.candidate is not None
    if fresh.clock == "cuda_event":  # the reference's windows moved, the candidate's device time did not
        drift = math.log(fresh.median_ms / 100.0)
        assert primary.speedup_interval == speedup_interval(fresh, primary.candidate, drift)
    else:  # the load slowed both: the check is the candidate's paired reference
        assert primary.speedup_interval == speedup_interval(fresh, primary.candidate)
    assert any("disagreed" in n for n in settled.notices), settled.notices


def test_on_a_devices_clock_the_reference_is_the_median_of_its_quiet_windows(
    tiny: Problem, warm: WarmPool, kept_cache: None
) -> None:
    """A quiet H200's checks read 59-120 ms on consecutive evaluations while the best kernel's device time
    held: one window's median made it 108x, then 216x. From three quiet windows on, the speedup divides
    their median, and its interval is that median's (how well the windows agree)."""
    result = timed_against_cache(tiny, warm, stats(100.0))
    refs = ReferenceTimes(tiny, result.env)
    refs.add_window(tiny.primary, stats(120.0))
    refs.add_window(tiny.primary, stats(200.0, busy=0.96))  # a loaded host's window is not one
    refs.add_window(tiny.primary, stats(60.0, clock="host"))  # nor a host-clock loop's
    assert refs.windows(tiny.primary)[-1:] == [120.0]
    refs.add_window(tiny.primary, stats(60.0))
    settled = finish(
        tiny, settle(tiny, result, stats(90.0, busy=0.05))
    )  # the headline's figures: tools/figures.py
    primary = settled.primary_timing
    assert primary is not None
    assert primary.candidate is not None
    reference = primary.reference
    assert reference is not None
    assert primary.reference_check == stats(90.0, busy=0.05)
    assert (reference.windows, reference.median_ms, reference.min_ms, reference.max_ms) == (
        3,
        90.0,
        60.0,
        120.0,
    )
    assert primary.reference_cached
    assert settled.speedup == pytest.approx(90.0 / 25.0)
    assert primary.speedup_interval == speedup_interval(reference, primary.candidate)
    assert contains_its_speedup(settled)
    assert any("last 3 quiet windows" in n for n in settled.notices), settled.notices
    # The next window moves the median little, and only the last WINDOWS are kept.
    for ms in [58.0, 119.0, 95.0, 61.0, 118.0, 92.0, 85.0]:
        settled = finish(tiny, settle(tiny, result, stats(ms)))  # the headline's figures: tools/figures.py
    assert (
        ReferenceTimes(tiny, result.env).windows(tiny.primary)
        == [120.0, 60.0, 90.0, 58.0, 119.0, 95.0, 61.0, 118.0, 92.0, 85.0][-9:]
    )
    assert settled.speedup == pytest.approx(90.0 / 25.0)


def test_a_busy_check_divides_the_quiet_windows_before_it_not_one_cached_median(
    tiny: Problem, warm: WarmPool, kept_cache: None
) -> None:
    """On a loaded H200 the busy path's cached median (64.9 ms, one window) stood where the quiet evaluations
    beside it divided their windows' median (82.4 ms): the same kernel ranked by two references. A busy check
    is no window, and the windows before it are the reference."""
    result = timed_against_cache(tiny, warm, stats(65.0))
    refs = ReferenceTimes(tiny, result.env)
    for ms in [80.0, 85.0, 82.0]:
        refs.add_window(tiny.primary, stats(ms))
    busy = stats(150.0, busy=0.96)
    settled = finish(tiny, settle(tiny, result, busy))  # the headline's figures: tools/figures.py
    primary = settled.primary_timing
    assert primary is not None
    assert primary.reference is not None
    assert primary.reference_check == busy
    assert (primary.reference.windows, primary.reference.median_ms) == (3, 82.0)
    assert settled.speedup == pytest.approx(82.0 / 25.0)
    assert ReferenceTimes(tiny, result.env).windows(tiny.primary) == [80.0, 85.0, 82.0]
    assert any("not one of them: 96% of the host's CPUs were busy" in n for n in settled.notices), (
        settled.notices
    )


def test_before_three_quiet_windows_a_check_settles_as_before(
    tiny: Problem, warm: WarmPool, kept_cache: None
) -> None:
    result = timed_against_cache(tiny, warm, stats(100.0))
    settled = finish(tiny, settle(tiny, result, stats(104.0)))  # the headline's figures: tools/figures.py
    primary = settled.primary_timing
    assert primary is not None
    assert primary.reference == stats(100.0)  # the cached median agreed and stands
    assert primary.reference is not None
    assert primary.reference.windows is None
    assert ReferenceTimes(tiny, result.env).windows(tiny.primary) == [104.0]


def on_a_devices_clock(result: BenchResult) -> BenchResult:
    """`result` (the tiny CPU problem's) as if its candidate had been timed by a device's clock, before its
    paired check (the real benchmark that made `result` may have made one: a reference cached by earlier tests)."""
    timings = [t.model_copy() for t in result.timings]
    primary = next(t for t in timings if t.primary)
    assert primary.candidate is not None
    primary.candidate = primary.candidate.model_copy(update={"clock": "cuda_event"})
    primary.reference_check = None
    return result.model_copy(update={"timings": timings})


def age_newest_window(tiny: Problem, result: BenchResult, seconds: float | None) -> None:
    """The cache's time of the newest window moved `seconds` into the past (None: removed, as in a cache
    written before that time was kept)."""
    path = cache_root() / "reference_times.json"
    data = json.loads(path.read_text())
    key = f"{ReferenceTimes(tiny, result.env).prefix}|{tiny.primary.name}|windows_at"
    if seconds is None:
        del data[key]
    else:
        data[key] = time.time() - seconds
    path.write_text(json.dumps(data))


def test_while_the_newest_window_is_fresh_the_reference_is_not_timed_again(
    tiny: Problem, warm: WarmPool, kept_cache: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an H100 the check held the device alone 0.425 s of an evaluation's 0.675 s (2026-12-07), and from
    three quiet windows on it only adds itself to them: while the newest is younger than FRESH_WINDOW_S the
    speedup divides the windows as they are, and the note says why nothing was timed."""
    checks: list[str] = []

    def timed(*_args: Any, **_kwargs: Any) -> Any:
        checks.append("timed")
        raise LookupError("the check's truth request")

    host = timed_against_cache(tiny, warm, stats(100.0))  # the tiny CPU problem's, by the host's clock
    result = on_a_devices_clock(host)
    monkeypatch.setattr(_paired, "time_reference_now", timed)
    plan, job = cast(Any, None), cast(Any, None)  # only the check's own request would read them

    def check() -> BenchResult:
        return check_cached_reference(tiny, plan, job, None, result)

    refs = ReferenceTimes(tiny, result.env)
    for ms in [80.0, 85.0]:
        refs.add_window(tiny.primary, stats(ms))
    with pytest.raises(LookupError):  # two windows: the check is made
        check()
    refs.add_window(tiny.primary, stats(82.0))
    skipped = check()
    assert checks == ["timed"]
    primary = skipped.primary_timing
    assert primary is not None
    assert primary.reference is not None
    assert primary.candidate is not None
    assert primary.reference_check is None
    assert (primary.reference.windows, primary.reference.median_ms) == (3, 82.0)
    assert primary.eager_speedup == pytest.approx(82.0 / 25.0)
    assert primary.eager_interval == speedup_interval(primary.reference, primary.candidate)
    assert any("last 3 quiet windows" in n and "not timed again now" in n for n in skipped.notices), (
        skipped.notices
    )
    # Past FRESH_WINDOW_S, or where the cache never kept the newest window's time, the check is made again.
    for age in (FRESH_WINDOW_S + 1, None):
        age_newest_window(tiny, result, age)
        assert pooled_without_check(tiny, result) is None
        with pytest.raises(LookupError):
            check()
    # A host-clock candidate (a CPU problem) pairs with the check timed beside it, every evaluation.
    refs.add_window(tiny.primary, stats(82.0))
    assert pooled_without_check(tiny, result) is not None
    assert pooled_without_check(tiny, host) is None
