"""A loaded host is measured and said (tools/worker/timing.py `LoadMeter`): the share of the timing process's
CPUs that other processes kept busy while a loop ran. On this 2-core machine the CPU demo's kernel benched
3.8-4.0x quiet and 2.1x beside one busy process, with an interval that looked as sure as a quiet one's.
Real processes: spinners that keep CPUs busy, a real evaluation of the tiny problem."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.candidates import scan_variants as v
from tools import benchmark
from tools.cache.reference_times import ReferenceTimes
from tools.judge._verdicts import load_notices
from tools.problem import Problem
from tools.results import BUSY_ELSEWHERE, EnvInfo, ShapeTiming, TimingStats
from tools.supervise import WarmPool
from tools.worker.timing import LoadMeter


@contextmanager
def spinners() -> Iterator[None]:
    """Enough busy processes that more than half of this process's CPUs are taken, whatever their count."""
    count = len(os.sched_getaffinity(0)) // 2 + 1
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.3)  # started and spinning
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def stats(busy: float | None, rse: float = 0.01) -> TimingStats:
    return TimingStats(
        median_ms=10.0, rse=rse, n=9, min_ms=9.0, max_ms=11.0, mean_ms=10.0, busy_elsewhere=busy
    )


def test_the_meter_sees_other_processes_and_not_this_ones_own_work() -> None:
    meter = LoadMeter()
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:  # this process's own spinning is not "elsewhere"
        pass
    own = meter.share()
    assert own is not None
    assert own < BUSY_ELSEWHERE or os.getloadavg()[0] > 1.5  # unless something else ran meanwhile
    with spinners():
        meter = LoadMeter()
        time.sleep(1.0)
        loaded = meter.share()
    assert loaded is not None
    assert loaded >= 0.4  # over half the CPUs spun, less the scheduler's share for everything else


def test_a_reference_median_timed_on_a_busy_host_is_not_served(tiny: Problem) -> None:
    refs = ReferenceTimes(tiny, EnvInfo.model_validate({"torch": "test-load", "python": "3"}))
    refs.put(tiny.primary, stats(busy=0.6))
    assert refs.get(tiny.primary) is None
    refs.put(tiny.primary, stats(busy=0.05))
    assert refs.get(tiny.primary) == stats(busy=0.05)
    refs.put(tiny.primary, stats(busy=None))  # where /proc/stat cannot be read: as before
    assert refs.get(tiny.primary) is not None


def test_a_busy_loop_is_noticed_for_the_one_that_ran_then() -> None:
    sizes = {"batch_size": 1}
    quiet = ShapeTiming(name="s", primary=True, sizes=sizes, candidate=stats(0.1), reference=stats(0.0))
    assert load_notices([quiet]) == []
    busy = ShapeTiming(name="s", primary=True, sizes=sizes, candidate=stats(0.48), reference=stats(0.6))
    notes = load_notices([busy])
    assert len(notes) == 2
    assert "48% of the host's CPUs busy while the candidate was timed" in notes[0]
    assert "while the reference was timed" in notes[1]
    cached = busy.model_copy(update={"reference_cached": True})  # a cached one was timed some other time
    assert len(load_notices([cached])) == 1


def test_an_evaluation_beside_busy_processes_says_so(tiny: Problem, warm: WarmPool) -> None:
    with spinners():
        result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    primary = result.primary_timing
    assert primary is not None
    assert primary.candidate is not None
    assert primary.candidate.busy_elsewhere is not None
    assert primary.candidate.host_was_busy, primary.candidate
    assert any("busy while the candidate was timed" in n for n in result.notices), result.notices
