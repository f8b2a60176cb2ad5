"""The paired check: a cached reference median is used for a speedup only while the reference, timed again
briefly in the same window as the candidate, agrees with it.

The eager speedup (the headline divides the launch-free reference instead: tools/figures.py, docs/ranking.md)
divides the reference's median by the candidate's. The reference's comes from a cache (timing it
costs seconds), so it may have been measured under other conditions: the CPU demo on a busy 2-core machine
reported 0.90× for a kernel that benches 1.7-2.0× later, and on the H200 the same reference ran at 54.5 ms
on one host and 98.2 ms on another. After the candidate is timed, while the evaluation still holds the
device, the truth worker times the reference at the primary shape for a few calls. Where that median
agrees with the cached one (within `MIN_DRIFT`, or the two spreads, and inside the range of the check's
calls), the cached median stands; where it does not, the fresh median is this result's reference at the
primary shape and, where steady enough to be served, the cached one from now on; the result says so.
Either way the speedup's interval is that of the ratio reported, widened by the drift between the two
windows where the cached median stood or, on a GPU, where the check replaced it (`window_drift`;
tools/judge/_ratio.py). The other shapes' cached medians are not
checked (a check of each would cost the H200 ~1 s a shape).

On a device's clock one window's median is itself a draw: a quiet H200's checks moved 59-120 ms between
consecutive evaluations while the candidates' device times held. There the reference's quiet windows (its
full loops and its checks) are kept (tools/cache/reference_times.py), and from `MIN_WINDOWS` on the speedup
divides their median (`pooled`), the check timed now the newest of them where it is one (a busy or
unsteady check is not; the windows before it stand). From then on a check changes nothing but the windows
(one among `WINDOWS`), so it is made only where the newest window is older than `FRESH_WINDOW_S`: on an H100
it held the device alone 0.425 s of an evaluation's 0.675 s (bench/results/h100/2026-12-07b/), and skipping
it leaves that time to the other trajectories' candidates. A CPU problem's check is its candidate's paired
reference (the host's clock): it is made every evaluation.

A disagreement the host explains is not the device's: a check timed by the device's clock that ran slower
while other processes kept the host busy (`slowed_by_host`). A launch-bound eager reference follows the host
(the selective scan's ran 1.2-3.2x slower beside 16 busy processes on the H200, 2026-12-04) while a
candidate's device time does not, so dividing that check inflated speedups (best 149x quiet, 208x loaded).
The cached median, timed on a quiet host, stands then, its interval widened by the most drift a check that
agreed could have had; a device really slower than when the median was cached would slow the candidate too,
so that errs low, never high. A CPU problem's reference and candidate share the host's clock and its load:
the check timed now is the one paired with the candidate there.
"""

from __future__ import annotations

import math
import statistics

from tools import orders, wire
from tools.cache.reference_times import MAX_CACHED_REFERENCE_RSE, ReferenceTimes, is_window
from tools.host import timing_threads
from tools.judge._plan import Plan, truth_servers
from tools.judge._ratio import speedup_interval
from tools.judge._verdicts import busy_note
from tools.problem import Problem
from tools.results import BenchResult, ShapeTiming, TimingStats
from tools.supervise import (
    ChildOutcome,
    Deadline,
    DeviceTurns,
    Job,
    WarmPool,
    child_env,
    cpu_env,
    run_child,
)
from tools.supervise.truth_server import TruthServer
from tools.worker.timing import median_rse

CALLS = 5  # the reference's timed calls in a check, after one warm-up
MIN_DRIFT = 0.10  # a cached median within this fraction of the check's stands ...
SIGMAS = 3.0  # ... or within this many standard errors of the two medians
CHECK_SECONDS = 10.0  # the check's own bound on its timing loop
MIN_WINDOWS = 3  # quiet windows on a device's clock before the reference's median is theirs (`pooled`)
FRESH_WINDOW_S = 30.0  # from MIN_WINDOWS on, a check is made only where the newest window is older than this


def agrees(cached: TimingStats, fresh: TimingStats) -> bool:
    """Within the drift the two spreads allow, and inside the range the check's calls spanned (a check on a
    loaded machine, 51 % RSE, allows any drift by its spread, but a cached median 1.6x above its slowest
    call is still not its median)."""
    drift = abs(fresh.median_ms / cached.median_ms - 1.0)
    within_spread = drift <= max(MIN_DRIFT, SIGMAS * (cached.rse + fresh.rse))
    within_range = fresh.min_ms * (1 - MIN_DRIFT) <= cached.median_ms <= fresh.max_ms * (1 + MIN_DRIFT)
    return within_spread and within_range


def slowed_by_host(cached: TimingStats, fresh: TimingStats) -> bool:
    """The check disagreed by being slower, timed by the device's clock while the host was busy."""
    return fresh.clock == "cuda_event" and fresh.host_was_busy and fresh.median_ms > cached.median_ms


def window_drift(cached: TimingStats, fresh: TimingStats) -> float:
    """How far the ratio reported from the check may be from another window's, beyond the check's own spread.
    On a device's clock the candidate's time does not follow the host's window while the eager reference's
    does (a quiet H200's checks read 59-120 ms on consecutive evaluations, the best kernel's device time
    0.49-0.62 ms): the ratio is known no better than the two windows agree. On the host's clock the load
    slows both, and the check timed beside the candidate is the ratio's paired reference."""
    return abs(math.log(fresh.median_ms / cached.median_ms)) if fresh.clock == "cuda_event" else 0.0


def pooled(windows: list[float]) -> TimingStats:
    """The reference's median over its quiet windows on a device's clock, with the median's standard error
    over them: on a quiet H200 its checks read 59-120 ms on consecutive evaluations while the best kernel's
    device time held at 0.49-0.62 ms, so one window's median made the same kernel 108x on one evaluation and
    216x on the next. The median of the last few windows moves little, and its interval says how well the
    windows agree."""
    return TimingStats(
        median_ms=statistics.median(windows), rse=median_rse(windows), n=len(windows), min_ms=min(windows),
        max_ms=max(windows), mean_ms=statistics.fmean(windows), clock="cuda_event", windows=len(windows),
    )  # fmt: skip


def not_a_window(fresh: TimingStats) -> str:
    if fresh.host_was_busy:
        return f"{fresh.busy_elsewhere:.0%} of the host's CPUs were busy"
    return f"its spread {fresh.rse:.1%} is over the {MAX_CACHED_REFERENCE_RSE:.0%} a window may have"


def check_request(problem: Problem, plan: Plan) -> orders.TruthRequest:
    """The truth worker's request: the reference timed at the primary shape, no truth, no data files."""
    index = problem.spec.timing.index(problem.primary)
    shape = plan.timing[index].truth
    cfg = shape.reference_cfg.model_copy(
        update={"warmup": 1, "min_iters": CALLS, "max_iters": CALLS,
                "max_seconds": min(shape.reference_cfg.max_seconds, CHECK_SECONDS)}
    )  # fmt: skip
    check = shape.model_copy(update={"truth_offsets": [], "time_reference": True, "reference_cfg": cfg})
    return orders.TruthRequest(
        reference_source=problem.reference_source, device=problem.spec.device, timing=[check],
        threads=timing_threads(problem),
    )  # fmt: skip


def time_reference_now(
    problem: Problem,
    plan: Plan,
    job: Job,
    pool: WarmPool | None,
    turns: DeviceTurns | None = None,
    own: TruthServer | None = None,
) -> ChildOutcome:
    """The reference timed at the primary shape now: by a warm truth server (the evaluation's `own` where
    idle) on the caller's `turns` (it takes the device alone for the loop), or by a cold truth worker."""
    request = check_request(problem, plan)
    deadline = Deadline(CHECK_SECONDS * 3 + 30)
    if pool is not None:
        return pool.run_truth(problem.data_hash, request, deadline, turns, truth_servers(problem), own)
    path = job.private / "reference_check.json"
    path.write_text(request.model_dump_json())
    workdir = job.private / "reference_check_work"
    workdir.mkdir(exist_ok=True)
    env = child_env(workdir, cpu_env(timing_threads(problem)), harness=job.harness)
    return run_child("tools.worker.truth", [str(path)], cwd=workdir, env=env, deadline=deadline)


def check_cached_reference(
    problem: Problem,
    plan: Plan,
    job: Job,
    pool: WarmPool | None,
    result: BenchResult,
    turns: DeviceTurns | None = None,
    own: TruthServer | None = None,
) -> BenchResult:
    """`result` (ok, timed against a cached reference median at the primary shape) after the paired check,
    made by the evaluation's `own` truth server where it is idle."""
    primary = result.primary_timing
    if (
        primary is None
        or not primary.reference_cached
        or primary.reference is None
        or primary.candidate is None
    ):
        return result
    skipped = pooled_without_check(problem, result)
    if skipped is not None:
        return skipped
    outcome = time_reference_now(problem, plan, job, pool, turns, own)
    ready = outcome.first(wire.TimingReady)
    fresh = ready.reference if ready is not None else None
    if fresh is None:
        err = outcome.first(wire.TruthError)
        why = err.message if err else f"the truth worker ended with exit {outcome.returncode}"
        result.notices.append(f"the reference could not be timed again to check its cached median ({why})")
        return result
    return settle(problem, result, fresh)


def pooled_without_check(problem: Problem, result: BenchResult) -> BenchResult | None:
    """`result` divided by the reference's quiet windows without timing it again, where a check could only
    add itself to them: on a device's clock, from `MIN_WINDOWS` windows on, while the newest is younger than
    `FRESH_WINDOW_S`. None where a check is due."""
    primary = result.primary_timing
    if primary is None or primary.reference is None or primary.candidate is None:
        return None
    if primary.reference.clock != "cuda_event" or primary.candidate.clock != "cuda_event":
        return None
    refs = ReferenceTimes(problem, result.env)
    windows, age = refs.windows(problem.primary), refs.newest_window_age(problem.primary)
    if len(windows) < MIN_WINDOWS or age is None or age > FRESH_WINDOW_S:
        return None
    timings = [t.model_copy() for t in result.timings]
    why = f"not timed again now: the newest is {age:.0f} s old, a check is made once it is {FRESH_WINDOW_S:.0f} s"
    return divided_by_windows(result, timings, windows, why)


def divided_by_windows(
    result: BenchResult, timings: list[ShapeTiming], windows: list[float], why: str
) -> BenchResult:
    """`result` with `timings`, whose primary shape's eager speedup divides the median of the reference's
    quiet `windows` (`pooled`); its note ends with `why` (the check timed now, or why none was)."""
    checked = next(t for t in timings if t.primary)
    if checked.candidate is None:
        raise ValueError("the reference's windows divide a candidate timed at the primary shape")
    reference = pooled(windows)
    checked.reference, checked.reference_cached = reference, True
    checked.eager_speedup = reference.median_ms / checked.candidate.median_ms
    checked.eager_interval = speedup_interval(reference, checked.candidate)
    note = (
        f"{checked.name}: the reference's median {reference.median_ms:.3f} ms is that of its last "
        f"{len(windows)} quiet windows on this host ({reference.min_ms:.3f}-{reference.max_ms:.3f} ms; {why})"
    )
    return result.model_copy(update={"timings": timings, "notices": [*result.notices, note]})


def settle(problem: Problem, result: BenchResult, fresh: TimingStats) -> BenchResult:
    """`result` with the reference's `fresh` check at the primary shape. On a device's clock a quiet check is
    a window, and from `MIN_WINDOWS` windows on their median is the reference. Otherwise the cached median
    stands where the two agree or the host explains the check's slowness; elsewhere the check is this
    result's reference."""
    primary = result.primary_timing
    if primary is None or primary.reference is None or primary.candidate is None:
        raise ValueError("a paired check settles a result timed against a reference at its primary shape")
    cached, candidate = primary.reference, primary.candidate
    timings = [t.model_copy() for t in result.timings]
    checked = next(t for t in timings if t.primary)
    checked.reference_check = fresh
    # A busy or unsteady check is no window, but the quiet windows before it still are the reference: the
    # busy path's cached median (one window) made a loaded H200's evaluations 64.9 ms where the quiet ones
    # beside them divided the windows' 82.4 ms.
    windows = ReferenceTimes(problem, result.env).add_window(problem.primary, fresh)
    if len(windows) >= MIN_WINDOWS:
        now = f"timed now beside the candidate: {fresh.median_ms:.3f} ms"
        if not is_window(fresh):
            now += f", not one of them: {not_a_window(fresh)}"
        return divided_by_windows(result, timings, windows, now)
    if agrees(cached, fresh):  # the cached median stands, known no better than the two windows agree
        checked.eager_interval = speedup_interval(
            cached, candidate, math.log(fresh.median_ms / cached.median_ms)
        )
        return result.model_copy(update={"timings": timings})
    if slowed_by_host(cached, fresh):
        checked.eager_interval = speedup_interval(cached, candidate, math.log1p(MIN_DRIFT))
        note = (
            f"{checked.name}: the reference timed now beside the candidate ({fresh.median_ms:.3f} ms, {CALLS} "
            f"calls) ran slower than its cached median ({cached.median_ms:.3f} ms) while other processes kept "
            f"{fresh.busy_elsewhere:.0%} of the host's CPUs busy: the eager reference's launches follow the "
            "host, the candidate's device time does not, so the speedup divides the cached median (timed on a "
            "quiet host)"
        )
        return result.model_copy(update={"timings": timings, "notices": [*result.notices, note]})
    replaced = fresh.rse <= MAX_CACHED_REFERENCE_RSE and not fresh.host_was_busy
    if replaced:  # the next evaluations check against it; their truth made ahead stays usable
        ReferenceTimes(problem, result.env).put(problem.primary, fresh)
    checked.reference, checked.reference_cached = fresh, False
    checked.eager_speedup = fresh.median_ms / candidate.median_ms
    checked.eager_interval = speedup_interval(fresh, candidate, window_drift(cached, fresh))
    note = (
        f"{checked.name}: the reference's cached median ({cached.median_ms:.3f} ms) disagreed with the reference "
        f"timed now beside the candidate ({fresh.median_ms:.3f} ms, {CALLS} calls): the speedup uses the one "
        f"timed now{', which replaces the cached one' if replaced else ''}"
    )
    others = [t.name for t in timings if not t.primary and t.reference_cached]
    if others:
        note += f" (the other shapes' speedups still divide the cached medians: {', '.join(others)})"
    busy = busy_note(checked.name, "reference", fresh)
    notices = [*result.notices, note, *([busy] if busy else [])]
    return result.model_copy(update={"timings": timings, "notices": notices})
