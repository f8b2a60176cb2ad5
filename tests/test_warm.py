"""Warm evaluation workers (tools/supervise/pool.py) on the CPU: real zygote, real truth server, real candidates.

Candidates are the shipped C++ baseline with only its Python edited, so the C++ is built once per run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.candidates import scan_variants as v
from tests.helpers import REPO, TINY
from tools import benchmark, compile_kernel
from tools.problem import Problem
from tools.results import BenchResult, EnvInfo
from tools.supervise import WarmPool

LEAVES_STATE = v.replace("import torch\n", "import torch\ntorch.kagent_leftover = 1\n")
SEES_STATE = v.with_forward_tail('if "kagent_leftover" in vars(torch):', "    y = y * 0")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def serve_reference_times(problem: Problem, cache: Path, monkeypatch: pytest.MonkeyPatch) -> EnvInfo:
    """A cache of the test's own (`cache`) holding a reference time for each of `problem`'s shapes: its
    truth requests time nothing; returns the environment they are keyed on."""
    from tools.cache.reference_times import ReferenceTimes
    from tools.envinfo import collect_env
    from tools.results import TimingStats

    monkeypatch.setenv("KERNEL_AGENT_CACHE", str(cache))
    env = collect_env(problem)
    cached = TimingStats(median_ms=5.0, rse=0.01, n=5, min_ms=4.9, max_ms=5.1, mean_ms=5.0, clock="host")
    for shape in problem.spec.timing:
        ReferenceTimes(problem, env).put(shape, cached)
    return env


def _verdict(r: BenchResult) -> tuple[object, ...]:
    cases = [(c.name, c.status, c.max_abs_err, c.rel_l2_err) for c in r.cases]
    return r.status, r.correct, r.flags, cases, r.seed


@pytest.mark.slow
def test_warm_and_cold_give_the_same_verdicts(
    tiny: Problem, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm_results = [
        benchmark(tiny, code, seed=1234567890123, pool=warm) for code in (v.baseline(), v.wrong_no_skip())
    ]
    monkeypatch.setenv("KERNEL_AGENT_WARM", "0")
    cold_results = [benchmark(tiny, code, seed=1234567890123) for code in (v.baseline(), v.wrong_no_skip())]
    assert [r.workers for r in warm_results + cold_results] == ["warm", "warm", "cold", "cold"]
    assert [r.status for r in warm_results] == ["ok", "incorrect"]
    # Same seed, same data, same deterministic kernel: identical verdicts and errors, case by case.
    assert [_verdict(r) for r in warm_results] == [_verdict(r) for r in cold_results]
    assert warm_results[0].timings[0].rechecked
    assert all(c.status == "passed" for c in warm_results[0].timings[0].rechecked)
    for r in warm_results + cold_results:
        assert {"candidate_start", "compile_import", "cases", "judge", "other"} <= set(r.phases)
        assert sum(r.phases.values()) == pytest.approx(r.seconds, abs=0.05)


def test_truth_prepared_ahead_is_fresh_and_judges_like_any_other(tiny: Problem, warm: WarmPool) -> None:
    first = benchmark(tiny, v.baseline(), pool=warm)  # times nothing anew afterwards: prefetch starts
    assert first.status == "ok", first.message
    assert warm.pending(tiny.data_hash)
    second = benchmark(tiny, v.wrong_no_skip(), pool=warm)
    third = benchmark(tiny, v.baseline(), pool=warm)
    assert second.status == "incorrect", second.message
    assert third.status == "ok", third.message
    # Prepared ahead: no truth worker ran on these evaluations' critical path.
    assert "truth_start" not in second.phases
    assert "truth_start" not in third.phases
    assert len({first.seed, second.seed, third.seed}) == 3  # a fresh secret seed every evaluation


def test_a_cpu_evaluation_beside_another_makes_its_next_truth_only_after_it(
    tiny: Problem, warm: WarmPool
) -> None:
    """A CUDA evaluation with another in flight starts the next one's truth as it starts (its truth takes the
    device only for its forwards; tests/test_gpu_evaluator.py); a CPU problem's truth would hold the device
    its loops are timed on throughout, so beside another evaluation it is still made only after."""
    from tools.judge._ahead import made_beside
    from tools.problem import load_problem

    cuda = load_problem(REPO / "problems" / "selective_scan.yaml")
    assert [made_beside(cuda, n) for n in (1, 2, 3)] == [False, True, True]
    assert [made_beside(tiny, n) for n in (1, 2)] == [False, False]
    assert benchmark(tiny, v.baseline(), pool=warm).status == "ok"  # the reference's medians timed
    warm.wait_prefetch(tiny.data_hash)
    assert warm.pending(tiny.data_hash) == 1
    with warm.evaluating():  # another trajectory's evaluation in flight
        beside = benchmark(tiny, v.baseline(), pool=warm)
        assert beside.status == "ok", beside.message
        # the one made ahead taken, one made after it, none as it began
        assert warm.pending(tiny.data_hash) == 1
        warm.wait_prefetch(tiny.data_hash)


def test_an_evaluation_tells_the_pool_what_its_workers_pin_ahead(tiny: Problem, warm: WarmPool) -> None:
    """The kept outputs' pinned buffer a CUDA worker made ahead takes as it starts: the largest shape's checked
    calls' fp32 outputs, each aligned (tests/test_gpu_evaluator.py sees no copy wait for pinning)."""
    from tools.orders import MAX_PINNED_AHEAD, PrepareOrder
    from tools.worker.outputs import staging_bytes

    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "ok", result.message
    outputs = {
        t.name: 4 * t.sizes["batch_size"] * t.sizes["seq_len"] * t.sizes["d_model"] for t in tiny.spec.timing
    }
    checked = {t.name: len(t.rechecked) for t in result.timings}
    assert min(checked.values()) > 0
    assert warm.kept_bytes == max(staging_bytes([outputs[n]] * checked[n]) for n in checked)
    assert warm._pinned("cpu") == 0  # a CPU worker pins nothing
    warm.expect_kept(0)  # an evaluation whose truth failed: the hint stays
    assert warm.kept_bytes > 0
    warm.expect_kept(1 << 40)  # never more than the order allows
    assert warm.kept_bytes == MAX_PINNED_AHEAD
    containment = {"pidns": True, "netns": True, "no_caps": True}
    PrepareOrder.model_validate({"containment": containment, "kind": "cuda", "pinned_bytes": warm.kept_bytes})


def test_a_run_that_starts_has_its_first_evaluation_made_ahead(
    tiny: Problem, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agent run calls prepare_ahead as it starts (executor.warm_up): its first benchmark then finds its
    truth made while the model wrote the kernel, as every later one does."""
    from tools.benchmark import prepare_ahead

    # The reference median is cached (or its ahead one used) only where this host was quiet: not the question
    # here (test_reference_times.py pins that rule), and a loaded CI host would make truth anew.
    for where in ("tools.judge._ahead", "tools.cache.reference_times"):
        monkeypatch.setattr(f"{where}.servable", lambda stats: stats is not None)

    timed = benchmark(tiny, v.baseline(), pool=warm, prefetch_next=False)  # the reference timed on this host
    assert timed.status == "ok", timed.message
    assert not warm.pending(tiny.data_hash)
    assert prepare_ahead(tiny, pool=warm)
    assert warm.pending(tiny.data_hash)
    first = benchmark(tiny, v.baseline(), pool=warm)
    assert first.status == "ok", first.message
    assert "truth_start" not in first.phases  # no truth worker on its critical path


def test_a_run_starting_on_a_host_without_reference_medians_has_them_timed_ahead(
    tiny: Problem, warm: WarmPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new host: the truth made as the run starts times the reference too (nothing else runs then), so
    the first benchmark waits for none of it; its medians go to the cache, and the primary shape's is
    checked beside the candidate as any cached one (tools/judge/_paired.py)."""
    from tools.benchmark import prepare_ahead
    from tools.envinfo import collect_env
    from tools.judge._ahead import reference_cached

    # Every evaluation an earlier test made ahead, against the real cache's medians: one after it, and one more
    # where its next truth was made beside it (`made_beside`): discarding only the first failed this test in two
    # full runs on 2026-12-06 (the second was served, with a truth worker on its critical path).
    while warm.pending(tiny.data_hash):
        if (stale := warm.take_prefetched(tiny.data_hash)) is not None:
            stale.discard()
    monkeypatch.setattr("tools.cache.reference_times.cache_root", lambda: tmp_path)  # no medians here
    # Medians timed ahead serve only when timed on a quiet host (tools/cache/reference_times.py `servable`;
    # tests/test_host_load.py pins that rule): here the question is whether they are used, not whether this
    # shared host was quiet (at load 3 this test failed: the ahead medians were busy, so truth was made anew).
    for where in ("tools.judge._ahead", "tools.cache.reference_times"):
        monkeypatch.setattr(f"{where}.servable", lambda stats: stats is not None)
    env = collect_env(tiny)
    assert not reference_cached(tiny, env)
    assert prepare_ahead(tiny, pool=warm)
    warm.wait_prefetch(tiny.data_hash)  # the model's turn: nothing else runs beside the reference's loops
    first = benchmark(tiny, v.baseline(), pool=warm, prefetch_next=False)
    assert first.status == "ok", first.message
    assert "truth_start" not in first.phases  # no truth worker on its critical path ...
    assert "reference_timing" not in first.phases  # ... nor the reference's loops
    assert reference_cached(tiny, env)
    primary = first.primary_timing
    assert primary is not None
    assert primary.reference_check is not None  # checked as a cached median is (and replaced where it moved)


def test_the_final_recheck_times_longer_on_truth_made_ahead_from_an_unused_seed(
    tiny: Problem, warm: WarmPool
) -> None:
    """The re-check's problem differs only in its repetitions: same data key, so the truth made ahead while
    the run went on serves it, retuned to the longer timing. It waited 8.6 s for that prefetch and then made
    its own truth (H200 gate, 2026-12-01: 26 s a re-checked kernel)."""
    from agent.toolbox import more_repetitions

    longer = more_repetitions(tiny)
    assert longer.data_hash == tiny.data_hash
    assert longer.content_hash != tiny.content_hash
    other_sets = tiny.model_copy(
        update={"spec": tiny.spec.model_copy(update={"timing_config": tiny.spec.timing_config.model_copy(
            update={"input_sets": tiny.spec.timing_config.input_sets + 1})})}
    )  # fmt: skip
    assert other_sets.data_hash != tiny.data_hash  # more input sets: other data, other truth
    first = benchmark(tiny, v.baseline(), pool=warm)
    assert first.status == "ok", first.message
    warm.wait_prefetch(tiny.data_hash)
    recheck = benchmark(longer, v.baseline(), pool=warm)
    assert recheck.status == "ok", recheck.message
    assert "truth_start" not in recheck.phases  # no truth made on its critical path
    assert recheck.seed != first.seed
    timed = recheck.primary_timing
    assert timed is not None
    assert timed.candidate is not None
    assert timed.candidate.n >= longer.spec.timing_config.min_iters  # timed with the longer settings


def test_the_final_recheck_leaves_the_seed_to_the_evaluator(tiny: Problem) -> None:
    """A seed of its own would make truth nobody prepared; None takes a secret one never used before."""
    from agent.execution.executor import KernelJob
    from agent.toolbox import FINAL_RECHECK, more_repetitions

    class Recording:
        def benchmark(self, job: KernelJob, seed: int | None = 1) -> None:
            self.problem, self.seed = job.problem, seed

    executor = Recording()
    FINAL_RECHECK.run(executor, KernelJob(tiny, "code", "kernels/001.py"))  # type: ignore[arg-type]
    assert executor.seed is None
    assert executor.problem.content_hash == more_repetitions(tiny).content_hash


def test_a_crash_replaces_the_zygote_and_the_next_candidate_is_clean(tiny: Problem, warm: WarmPool) -> None:
    assert benchmark(tiny, v.baseline(), seed=11, pool=warm).status == "ok"
    before = warm.zygote_pid()
    crashed = benchmark(tiny, v.segfault(), seed=12, pool=warm)
    assert crashed.status == "crashed", crashed.message
    after = warm.zygote_pid()
    assert before is not None
    assert after is not None
    assert after != before
    assert not _alive(before)
    again = benchmark(tiny, v.baseline(), seed=13, pool=warm)
    assert again.status == "ok", again.message


def test_a_candidates_module_state_never_reaches_the_next_one(tiny: Problem, warm: WarmPool) -> None:
    # The first candidate leaves a marker on the torch module; were its process reused, the second would
    # see it and zero its output. Both are clean, so the zygote is not replaced between them.
    assert benchmark(tiny, v.baseline(), seed=21, pool=warm).status == "ok"
    zygote = warm.zygote_pid()
    leaves = benchmark(tiny, LEAVES_STATE, seed=22, pool=warm)
    sees = benchmark(tiny, SEES_STATE, seed=23, pool=warm)
    assert leaves.status == "ok", leaves.message
    assert sees.status == "ok", sees.message
    assert warm.zygote_pid() == zygote


def test_a_cache_hit_compiles_through_the_zygote(tiny: Problem, warm: WarmPool) -> None:
    result = compile_kernel(tiny, v.python_only_edit(), pool=warm)
    assert result.status == "ok", result.message
    assert result.cached


def test_prepared_data_is_off_limits_to_other_candidates(tiny: Problem) -> None:
    ev = WarmPool()
    try:
        assert benchmark(tiny, v.baseline(), pool=ev).status == "ok"
        ev.wait_prefetch(tiny.data_hash)
        files = list(ev.staging.rglob("*.pt"))
        assert files, "a prepared job waits in staging"
        snooper = v.replace("import torch\n", f"import torch\nopen({str(files[0])!r}, 'rb').read()\n")
        result = benchmark(tiny, snooper, seed=31, pool=ev)
        assert "forbidden_file_access" in result.flags
        assert not result.correct
        assert result.status == "import_error"
    finally:
        ev.shutdown()


SCRIPT = """
import json, os, signal, sys
from tests.candidates import scan_variants as v
from tools import benchmark
from tools.host import timing_threads
from tools.problem import load_problem
from tools.supervise import pool_for
p = load_problem(sys.argv[1])
r = benchmark(p, v.baseline())
ev = pool_for(None, timing_threads(p))
print(json.dumps({"status": r.status, "workers": r.workers, "zygote": ev.zygote_pid(), "root": str(ev.root),
                  "truth": [s.proc.pid for ss in ev._truth.values() for s in ss]}), flush=True)
if sys.argv[2] == "sigint":
    os.kill(os.getpid(), signal.SIGINT)
"""


@pytest.mark.parametrize("how", ["exit", "sigint"])
def test_no_process_or_folder_is_left_after_the_harness_exits(tiny: Problem, how: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(TINY), how],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "KERNEL_AGENT_WARM": "1"},
    )  # fmt: skip
    info = json.loads(proc.stdout.strip().splitlines()[0])
    assert info["status"] == "ok"
    assert info["workers"] == "warm"
    if how == "sigint":
        assert proc.returncode == -signal.SIGINT or "KeyboardInterrupt" in proc.stderr
    pids = [info["zygote"], *info["truth"]]
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids)
    assert not Path(info["root"]).exists()
    assert not _processes_mentioning(info["root"])  # forked candidates carry the zygote's environment


def _processes_mentioning(text: str) -> list[int]:
    needle = text.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


EXITS_AFTER = """
import sys, time
from tests.candidates import scan_variants as v
from tools import benchmark
from tools.problem import load_problem
result = benchmark(load_problem(sys.argv[1]), v.baseline())
print("DONE", result.status, time.time(), flush=True)
"""


def test_a_process_that_benchmarked_exits_at_once() -> None:
    """The warm pool's exit does not wait for the worker it was making ahead for the next evaluation (it
    waited 10 s, in every `agent bench` and at the end of every test session, once CPU evaluations had one)."""
    import time

    done = subprocess.run(
        [sys.executable, "-c", EXITS_AFTER, str(TINY)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    ended = time.time()
    line = next(x for x in done.stdout.splitlines() if x.startswith("DONE"))
    assert line.split()[1] == "ok", done.stdout + done.stderr
    assert ended - float(line.split()[2]) < 4.0


def test_asking_for_a_worker_made_ahead_does_not_wait_for_the_zygote_to_start(tiny: Problem) -> None:
    """The evaluation's truth starts at once: the order reaches a zygote still starting from a thread. Asked
    inline, the caller waited for the zygote's torch import (1.5 s here) before its truth began."""
    import time

    from tools.supervise.pool import WarmPool

    pool = WarmPool()
    try:
        began = time.monotonic()
        pool.prepare_worker("cpu")
        assert time.monotonic() - began < 0.5
        zygote = pool.zygote()
        assert not zygote.ready.is_set()  # it was still starting when the order was given
        assert zygote.wait_prepared(120)  # and the worker was made once it was up
        assert zygote.prepared_pids
    finally:
        pool.shutdown()


def test_a_cuda_evaluation_with_cores_to_spare_has_the_next_ones_worker_made_beside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Back to back on the H200 each evaluation waited 4.7 s for its worker (CUDA context, cuBLAS, the
    profiler), made only after the one before it ended: one is now made beside each CUDA evaluation, one more
    per other evaluation in flight (as many as a GPU takes bound it: at four trajectories a cap of three
    left 11 of 16 evaluations starting their own). A CPU timing reads the host clock: nothing beside it."""
    import importlib

    from tools.orders import MAX_PREPARED, Containment, PrepareOrder
    from tools.supervise.pool import EVALS_ENV, EVALUATIONS_PER_GPU

    bench_module = importlib.import_module("tools.benchmark")  # the module: `tools.benchmark` is the tool

    monkeypatch.delenv(EVALS_ENV, raising=False)
    monkeypatch.delenv("KERNEL_AGENT_WARM", raising=False)
    monkeypatch.setattr(bench_module, "cores_to_spare", lambda: True)
    assert bench_module.workers_ahead("cuda", running=0) == 2
    assert bench_module.workers_ahead("cuda", running=1) == 3
    assert bench_module.workers_ahead("cuda", running=3) == 5  # four trajectories: each its own and the next
    assert bench_module.workers_ahead("cuda", running=9) == 1 + EVALUATIONS_PER_GPU
    monkeypatch.setenv(EVALS_ENV, "2")
    assert bench_module.workers_ahead("cuda", running=9) == 3
    monkeypatch.setenv(EVALS_ENV, "64")  # a GPU taking many: the zygote's order still holds the count
    assert bench_module.workers_ahead("cuda", running=63) == MAX_PREPARED
    for running in (3, 63):  # the order is what carries it: four trajectories' five once failed its bound
        PrepareOrder(
            containment=Containment(pidns=True, netns=True, no_caps=True),
            kind="cuda",
            count=bench_module.workers_ahead("cuda", running),
        )
    assert bench_module.workers_ahead("cpu", running=0) == 1
    monkeypatch.setattr(bench_module, "cores_to_spare", lambda: False)
    assert bench_module.workers_ahead("cuda", running=0) == 1


def test_the_zygote_makes_as_many_workers_ahead_as_asked() -> None:
    """`prepare_worker(kind, count)` leaves `count` workers made or being made, the ones already there
    counted: asking again for the same count makes none more. Five: four trajectories on one GPU ask for
    that many (`workers_ahead`), which an order's bound of four once refused."""
    import time

    from tools.supervise.pool import WarmPool

    pool = WarmPool()
    try:
        pool.prepare_worker("cpu", 5)
        zygote = pool.zygote()
        deadline = time.monotonic() + 120
        while len(zygote.prepared_pids) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(zygote.prepared_pids) == 5
        first = set(zygote.prepared_pids)
        pool.prepare_worker("cpu", 5)
        time.sleep(1.0)
        assert zygote.prepared_pids == first
    finally:
        pool.shutdown()


def test_a_truth_server_in_use_outlives_another_problems_start() -> None:
    """Two problems evaluated at once in one pool (`agent suite --jobs 2`): starting the second's truth
    server stopped the first's between two of its requests, and the truth it kept for the evaluation in
    flight with it (CI: SIGKILL, `harness_error`). A server is retired for another problem's only when no
    evaluation claims it; once retired it cannot be claimed again, and its problem gets a new one."""
    pool = WarmPool()
    try:
        a = pool.truth_server("a")
        b = pool.truth_server("b")
        assert a.alive()
        assert b.alive()
        a.release()
        c = pool.truth_server("c")
        assert not a.alive()  # unclaimed and idle: retired to make room for c
        assert b.alive()
        assert c.alive()
        assert not a.claim()
        again = pool.truth_server("a")
        assert again is not a
        assert again.alive()
        for server in (b, c, again):
            server.release()
    finally:
        pool.shutdown()


def test_truth_made_ahead_waits_unclaimed_and_is_not_used_once_its_server_is_retired(
    tiny: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truth made ahead keeps no claim while it waits (an idle problem's server may make room for
    another's); the evaluation that takes it claims the server again, or, where the server was retired,
    makes its truth anew rather than judging against truth that is gone."""
    from tools.judge._ahead import obtain
    from tools.judge._plan import prepare

    env = serve_reference_times(tiny, tmp_path, monkeypatch)
    pool = WarmPool()
    try:
        ahead = prepare(tiny, env, 1234, pool=pool, parent=pool.staging, ahead=True)
        assert ahead.ok
        assert ahead.kept is not None
        assert not ahead.kept.claimed
        taken = obtain(tiny, env, None, False, pool, ahead, {})
        assert taken is ahead
        assert ahead.kept.claimed
        taken.discard()
        assert not ahead.kept.claimed

        stale = prepare(tiny, env, 5678, pool=pool, parent=pool.staging, ahead=True)
        assert stale.kept is not None
        other = pool.truth_server("another problem")  # retires the tiny problem's idle server
        assert not stale.kept.usable()
        fresh = obtain(tiny, env, None, False, pool, stale, {})
        assert fresh is not stale
        assert fresh.ok
        assert fresh.kept is not None
        assert fresh.kept.server is not stale.kept.server
        assert fresh.kept.claimed
        fresh.discard()
        other.release()
    finally:
        pool.shutdown()


def test_a_truth_servers_start_is_not_its_first_requests_time(
    tiny: Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's start (Python, torch) has its own bound: on a busy 2-core CI machine it once took most of
    the tiny problem's 30 s, and the first truth then timed out (`harness_error`). Here the evaluation's
    budget of 1 s is shorter than a cold start of the server (1.7 s here), the truth itself 0.2 s, and the
    truth is made."""
    import time

    from tests.helpers.problems import with_budget
    from tools.judge._plan import prepare

    short = with_budget(tiny, 1.0)
    env = serve_reference_times(short, tmp_path, monkeypatch)
    pool = WarmPool()
    try:
        started = time.monotonic()
        item = prepare(short, env, 99, pool=pool, parent=pool.staging)
        assert item.ok, item.truth.output
        assert not item.truth.timed_out
        item.discard()
        assert time.monotonic() - started > 1.0  # the server's start alone took longer than the budget
    finally:
        pool.shutdown()


SLOW_IMPORT = v.replace("import torch\n", "import torch\nimport time\ntime.sleep(4)\n")


def _compile_in_background(tiny: Problem, pool: WarmPool) -> tuple[Any, list[Any], int]:
    """A candidate whose import takes 4 s, compiled from `pool`'s zygote in a thread; returns the thread,
    the list its result lands in, and the worker's pid once the zygote has reported it."""
    import threading
    import time

    zygote = pool.zygote()
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(compile_kernel(tiny, SLOW_IMPORT, pool=pool)))
    thread.start()
    deadline = time.monotonic() + 120
    while not zygote.live and time.monotonic() < deadline:
        time.sleep(0.02)
    assert zygote.live, "the candidate was never forked"
    return thread, results, next(iter(zygote.live))


def test_a_replaced_zygote_lets_the_candidates_it_forked_finish(tiny: Problem, warm: WarmPool) -> None:
    """A fault in one trajectory's candidate replaces the zygote; another trajectory's candidate forked from
    it and still running finished as "crashed" (SIGKILL: the zygote's children die with it)."""
    assert compile_kernel(tiny, v.baseline(), pool=warm).ok  # the C++ built: the import is what takes time
    old = warm.zygote()
    thread, results, _ = _compile_in_background(tiny, warm)
    warm.replace_zygote()
    assert warm.zygote() is not old  # new candidates go to the new one at once
    thread.join(timeout=120)
    assert len(results) == 1
    assert results[0].status == "ok", results[0].message
    assert not old.alive()  # stopped once its last candidate ended


def test_a_sweep_spares_a_fork_not_yet_reported(tiny: Problem, warm: WarmPool) -> None:
    """After a worker ends, its leftovers are swept by the zygote's marker, sparing the zygote's other
    children. One forked for a parallel compile but not yet in `live` (its report still on the way) was
    killed: the sweep spares every child of the zygote, reported or not."""
    assert compile_kernel(tiny, v.baseline(), pool=warm).ok
    zygote = warm.zygote()
    thread, results, pid = _compile_in_background(tiny, warm)
    zygote.live.discard(pid)  # as between the fork and the zygote's report of it
    try:
        assert zygote.sweep_after(-1, "") == []
    finally:
        zygote.live.add(pid)
    thread.join(timeout=120)
    assert len(results) == 1
    assert results[0].status == "ok", results[0].message
