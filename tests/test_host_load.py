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
from pathlib import Path

import pytest

from tests.candidates import scan_variants as v
from tests.helpers import REPO
from tests.helpers.timing_report import describe_host, describe_timing, intervals_meet
from tools import benchmark
from tools.cache.reference_times import ReferenceTimes
from tools.envinfo import hardware_summary
from tools.host import timing_threads
from tools.judge._verdicts import load_notices
from tools.problem import Problem, load_problem
from tools.results import BUSY_ELSEWHERE, BenchResult, EnvInfo, ShapeTiming, TimingStats
from tools.supervise import KEPT_HEAP_ENV, WarmPool, pool_for, warm_enabled
from tools.worker.timing import LoadMeter

# Each reads the host's load or loads it: beside another worker's builds a quiet measurement would not be.
pytestmark = pytest.mark.serial


@contextmanager
def spinners(count: int | None = None) -> Iterator[None]:
    """`count` busy processes; by default enough that more than half of this process's CPUs are taken."""
    count = count or len(os.sched_getaffinity(0)) // 2 + 1
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


def test_a_cpu_problem_is_timed_on_half_the_host_unless_it_says() -> None:
    cpu = load_problem(REPO / "problems/selective_scan_cpu.yaml")
    cpus = len(os.sched_getaffinity(0))
    assert timing_threads(cpu) == max(1, cpus // 2)
    cfg = cpu.spec.timing_config.model_copy(update={"threads": 64})
    wide = cpu.model_copy(update={"spec": cpu.spec.model_copy(update={"timing_config": cfg})})
    assert timing_threads(wide) == cpus  # never more than the host has
    gpu = load_problem(REPO / "problems/selective_scan.yaml")
    assert timing_threads(gpu) is None
    assert f"OMP_NUM_THREADS={max(1, cpus // 2)}" in hardware_summary(cpu)  # the model is told


def test_a_cpu_candidate_runs_with_the_problems_thread_budget(tiny: Problem, warm: WarmPool) -> None:
    """torch's threads and the candidate's OpenMP runtime (OMP_NUM_THREADS) alike: a candidate that sees
    another count zeroes its output, and is then incorrect."""
    budget = timing_threads(tiny)
    assert budget is not None
    code = v.with_forward_tail(
        "import os as _os",
        f'if torch.get_num_threads() != {budget} or _os.environ.get("OMP_NUM_THREADS") != "{budget}":',
        "    y = y * 0",
    )
    result = benchmark(tiny, code, pool=warm)
    assert result.status == "ok", result.message


def test_a_cpu_candidate_reuses_the_memory_it_frees(tiny: Problem, warm: WarmPool) -> None:
    """The kept heap (tools.supervise.KEPT_HEAP_ENV), as the candidate's own process sees it: a 64 MiB block
    freed and allocated again, as a timing loop does, costs no page faults from the second time on (glibc's
    default maps a block that large afresh each time, 16k faults; kept with its small-chunk cache on, six times
    before torch's 64-byte-aligned blocks fitted a freed one). The CPU demo's reference spent 400-600 ms of its ~750 ms a call on
    such faults. A candidate whose last allocations fault zeroes its output, and is then incorrect."""
    code = v.with_forward_tail(
        "import resource as _r",
        "for _ in range(3):",
        "    _f = _r.getrusage(_r.RUSAGE_SELF).ru_minflt",
        "    _a = torch.ones(1 << 24); del _a",
        "    _faults = _r.getrusage(_r.RUSAGE_SELF).ru_minflt - _f",
        "if _faults > 1000:",
        "    y = y * 0",
    )
    result = benchmark(tiny, code, pool=warm)
    assert result.status == "ok", result.message


LOADED_TRIES = 3  # evaluations beside the busy process, until one's interval meets the quiet one's


@pytest.mark.long  # 60-125 s on 2 cores: a C++ build and 3-5 evaluations at the CPU problem's real size
def test_the_cpu_demos_speedup_holds_beside_a_busy_process(warm: WarmPool) -> None:
    """The goal of timing on part of the host: before it, the demo's kernel benched 3.8-4.0x quiet and 2.1x
    beside one busy process on this 2-core machine (the reference, thousands of small parallel torch ops,
    slowed ~2.7x; the OpenMP kernel ~2x). With every process of the evaluation started at half the host's
    threads, 3.4-3.9x quiet and 2.8-3.8x beside it (2026-12-02, 13 evaluations): the candidate's one thread
    still lost 0-28 % beside the busy process, so in one pair of six neither speedup lay inside the other's
    interval; their intervals met in all six. On CI's machine (2026-12-02) one loaded evaluation gave
    under 2.33x against a quiet 3.43x [3.21, 3.65] once, and met it in an earlier run: the loaded evaluation
    is tried up to LOADED_TRIES times (each says the host was busy), and one of them must meet the quiet
    interval; a harness whose loaded speedups sit apart from the quiet one's still fails. With the kept heap
    (tools.supervise.KEPT_HEAP_ENV; 2026-12-03) the reference paid no page faults: 1.32-1.57x quiet and
    1.38-1.48x beside the busy process, three evaluations each."""
    problem = load_problem(REPO / "problems/selective_scan_cpu.yaml")
    code = (REPO / "problems/selective_scan_cpu/trajectory/03_blocked_simd.py").read_text()
    quiet = benchmark(problem, code, pool=warm)
    quiets, loadeds = [_interval(quiet)], []
    shown = [f"quiet {describe_timing(quiet)}"]
    for _ in range(LOADED_TRIES):
        with spinners(1):
            loaded = benchmark(problem, code, pool=warm)
        shown.append(f"loaded {describe_timing(loaded)}")
        loadeds.append(_interval(loaded))
        if intervals_meet(quiets[0], loadeds[-1]):
            return
    # Once on CI's machine the quiet evaluation was the outlier (the kernel at 402 ms, 0.80x; its three loaded
    # ones 228-247 ms, 1.30-1.41x, and every other run 205-237 ms): a second quiet one, met by any loaded one.
    again = benchmark(problem, code, pool=warm)
    shown.append(f"quiet again {describe_timing(again)}")
    if any(intervals_meet(_interval(again), interval) for interval in loadeds):
        return
    pytest.fail("\n".join([*shown, describe_host()]))


def _interval(result: BenchResult) -> tuple[float, float]:
    assert result.status == "ok", result.message
    primary = result.primary_timing
    assert primary is not None
    assert primary.speedup is not None
    assert primary.speedup_interval is not None
    return primary.speedup_interval


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="reads /proc/<pid>/environ")
def test_a_cpu_problems_warm_workers_start_with_its_thread_budget(tiny: Problem) -> None:
    """Set per request (torch.set_num_threads in a zygote's child, in the truth server) the budget did not
    hold: a quiet evaluation measured the demo at 2.0x once and 3.9x twice. OpenMP reads it at its start."""
    budget = timing_threads(tiny)
    assert budget is not None
    if warm_enabled():
        assert pool_for(None, budget) is not pool_for(None, None)  # a CUDA problem's are unbudgeted
    pool, plain = WarmPool(threads=budget), WarmPool()
    try:
        zygote, truth = pool.zygote(), pool.truth_server(tiny.data_hash)
        for name, proc in (("zygote", zygote.proc), ("truth server", truth.proc)):
            env = _environ(proc.pid)
            # CI once read no OMP_NUM_THREADS here (2026-12-07, not reproduced): a process that has exited
            # reads an empty environ, so say whether it had before reading the budget
            assert proc.poll() is None, f"the {name} exited with {proc.returncode} as it started"
            assert env.get("OMP_NUM_THREADS") == env.get("MKL_NUM_THREADS") == str(budget), (name, env)
            assert {k: env.get(k) for k in KEPT_HEAP_ENV} == KEPT_HEAP_ENV, name
        truth.release()
        assert "OMP_NUM_THREADS" not in plain.extra_env
        assert (
            not KEPT_HEAP_ENV.keys() & plain.extra_env.keys()
        )  # a CUDA problem's host code: glibc's default
    finally:
        pool.shutdown()
        plain.shutdown()
