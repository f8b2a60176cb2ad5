"""Evaluations made ahead of their candidate: used where still valid (`obtain`), made after each evaluation,
as a run starts and, beside another evaluation, as one starts (`prefetch`, `made_beside`), the reference's
medians timed as a run starts adopted into the cache."""

from __future__ import annotations

import contextlib
import secrets
import threading

from tools import wire
from tools.cache.peaks import cached_peaks, host_peaks
from tools.cache.reference_times import ReferenceTimes, servable
from tools.host import timing_threads
from tools.judge._plan import Prepared, prepare, worker_kind
from tools.problem import Problem
from tools.results import EnvInfo, TimingStats
from tools.supervise import DeviceTurns, WarmPool


def prefetch_usable(item: Prepared, problem: Problem, env: EnvInfo) -> bool:
    """A prepared evaluation serves only where its truth is complete and each shape's reference median is
    known: cached, or timed as the evaluation was made (as a run starts) steadily on a quiet host."""
    refs = ReferenceTimes(problem, env)
    ahead = timed_ahead(item)
    known = all(refs.get(t) is not None or servable(ahead.get(t.name)) for t in problem.spec.timing)
    kept = item.kept is None or item.kept.usable()  # its truth is still where it was kept
    return item.ok and kept and known


def timed_ahead(item: Prepared) -> dict[str, TimingStats | None]:
    """The reference medians the truth timed while it made this evaluation, by shape."""
    timed = {t.name for t in item.plan.timing if t.truth.time_reference}
    return {m.name: m.reference for m in item.truth.all(wire.TimingReady) if m.name in timed}


def adopt_references(item: Prepared, problem: Problem, env: EnvInfo) -> None:
    """A prepared evaluation's reference medians, timed ahead, go to the cache: the evaluation then treats
    them as cached ones, checked beside the candidate (tools/judge/_paired.py), as they were timed
    before the candidate's window."""
    refs, ahead = ReferenceTimes(problem, env), timed_ahead(item)
    for shape in problem.spec.timing:
        stats = ahead.get(shape.name)
        if stats is not None and servable(stats):
            refs.put(shape, stats)
            if shape is problem.primary:
                refs.add_window(shape, stats)
    item.references_cached = True


def obtain(
    problem: Problem,
    env: EnvInfo,
    seed: int | None,
    refresh_reference: bool,
    pool: WarmPool | None,
    ready: Prepared | None,
    clock: dict[str, float],
    turns: DeviceTurns | None = None,
) -> Prepared:
    """The evaluation prepared ahead of time where it fits; otherwise data and truth made now, on `turns`;
    either way its kept truth's re-check takes `turns` too."""
    if pool is not None and ready is not None:
        if ready.kept is not None:
            ready.kept.turns = turns  # its re-check, or its forgetting, on this evaluation's turns
        if prefetch_usable(ready, problem, env) and (ready.kept is None or ready.kept.reclaim()):
            adopt_references(ready, problem, env)
            old = ready.job.move_to(pool.jobs_dir)
            ready.plan = ready.plan.relocated(old, ready.job.root).retuned(problem)
            return ready
        ready.discard()
    master = seed if seed is not None else secrets.randbits(62)
    parent = pool.jobs_dir if pool is not None else None
    item = prepare(
        problem, env, master, refresh_reference=refresh_reference, pool=pool, parent=parent, turns=turns
    )
    clock.update(item.phases)
    return item


def made_beside(problem: Problem, running: int) -> bool:
    """Whether the next evaluation's truth is made as this one starts (`prefetch`) instead of after it: a CUDA
    problem's, where another evaluation is in flight on the pool (`running` counts this one). Its timing is
    not alone on the host then anyway, and its timed loops still hold the device alone (the truth takes it
    for its forwards). Made only after each evaluation, back to back, every evaluation waited for its own
    truth: on the H200 two trajectories fell into step, both making truth, then both timing, the device
    idle 28.7 % of the time (main cfed4f2). Alone, an evaluation's candidate has the host to itself, and
    its next truth is made after it (while the model thinks). A CPU problem's truth holds the device shared
    throughout: beside an evaluation it would only stall that evaluation's timed loops."""
    return problem.spec.device == "cuda" and running > 1


def reference_cached(problem: Problem, env: EnvInfo) -> bool:
    """Every shape's eager median cached, and on a GPU its launch-free timing (or why there is none)."""
    refs = ReferenceTimes(problem, env)
    graphs = problem.spec.device == "cuda"
    return all(
        refs.get(t) is not None and (not graphs or refs.launch_free(t) is not None)
        for t in problem.spec.timing
    )


def prefetch(problem: Problem, env: EnvInfo, pool: WarmPool, first: bool = False) -> None:
    """After an evaluation (or as a run starts: `first`; or as one starts beside another: `made_beside`): make
    the next one's fresh-seeded data and truth, and its worker (on a CUDA problem with its context, cuBLAS
    and profiler started), while the caller thinks."""

    def make() -> Prepared:
        # A CUDA problem's truth takes the device only for its device work; a CPU problem's holds it shared
        # throughout (all its work runs on the device CPU loops are timed on).
        turns = DeviceTurns(pool.device)
        # A new host's peaks beside the truth server's start, which needs no device turn (H200: the peaks'
        # 3 s had come after the truth, and the first benchmark waited for them).
        peaks = threading.Thread(target=new_host_peaks, args=(problem, env, DeviceTurns(pool.device)))
        if first:
            peaks.start()
        try:
            turns.to("none" if problem.spec.device == "cuda" else "shared")
            return prepare(
                problem, env, secrets.randbits(62), pool=pool, parent=pool.staging, ahead=True, turns=turns
            )
        finally:
            turns.close()
            if first:
                peaks.join()

    # The reference is timed only where nothing else runs: on the critical path, or as a run starts (the model
    # writes its first kernel). After an evaluation the model's next compile may run beside it: no truth is made
    # ahead then. One timed while the host was busy is not used (`prefetch_usable`).
    truth = make if first or reference_cached(problem, env) else None
    pool.start_prefetch(problem.data_hash, truth, worker=worker_kind(problem))


def new_host_peaks(problem: Problem, env: EnvInfo, turns: DeviceTurns) -> None:
    """A GPU's peaks for the speed-of-light floor, where this host has none yet, measured as a run starts with
    the device alone (on a new H200 they cost its first benchmark ~3 s). Not a CPU's: a compile beside the
    measurement would lower the peaks cached for the host; the evaluation measures those."""
    threads = timing_threads(problem)
    if problem.spec.floor is None or problem.spec.device != "cuda" or cached_peaks("cuda", env, threads):
        return  # not the device alone for nothing: a suite's other problem may be timing there
    with turns.holding("exclusive"), contextlib.suppress(Exception):  # the evaluation measures them instead
        host_peaks("cuda", env, threads)
