"""The GPU path's rules that CI can check without a GPU (issue: "The GPU path works by default"):

- the candidate zygote never reaches the CUDA driver before it forks, checked on the real condition
  (a forked child is not in a "bad fork"), and a zygote that did is never used for a CUDA candidate;
- a call that never returns is cut off by a bound derived from the reference's time, not by the
  evaluation's whole budget, and the next candidate evaluates normally;
- a clock disagreement is re-measured in a fresh worker: one caused by the host alone is not flagged,
  one that persists makes the result `suspect` (never `incorrect`, no speedup); work left running after
  the end event is what the CUDA-event comparison flags, host overhead is not.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.candidates import scan_variants as v
from tests.helpers.problems import with_budget
from tools import benchmark, orders, wire
from tools.judge import _verdicts, clock_disagreement
from tools.problem import Limits, Problem
from tools.results import TimingStats
from tools.supervise import Deadline, Job, WarmPool, run_candidate
from tools.supervise.watchdog import EXIT_S, SETUP_S, Watchdog, call_bound

# --- the zygote and the CUDA driver ---------------------------------------------------------------------


def test_the_zygotes_children_are_not_in_a_bad_fork(warm: WarmPool) -> None:
    """torch.utils.cpp_extension asks torch.cuda.is_available() at import, which poisons every later fork
    while torch.cuda.is_initialized() stays false. The zygote's probe forks a child and asks torch whether
    that child is in a bad fork: here (no GPU) it must answer "no_gpu", never "poisoned"."""
    zygote = warm.zygote()
    zygote.wait_ready()
    assert zygote.cuda_fork in ("ok", "no_gpu"), zygote.cuda_fork


def test_a_zygote_that_reached_the_driver_never_serves_a_cuda_candidate(
    tiny: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    if torch.version.cuda is None:
        pytest.skip(f"torch {torch.__version__} is a CPU build: it has no CUDA driver to reach")
    monkeypatch.setenv("KERNEL_AGENT_TEST_POISON_FORK", "1")
    cuda = tiny.model_copy(update={"spec": tiny.spec.model_copy(update={"device": "cuda"})})
    ev = WarmPool()
    try:
        zygote = ev.zygote()
        zygote.wait_ready()
        assert zygote.cuda_fork.startswith("poisoned"), zygote.cuda_fork
        with Job.create(v.baseline(), ev.jobs_dir) as job:
            bench = orders.CandidateRequest(mode="bench")
            outcome = run_candidate(job, cuda, bench, launcher=ev.launch_candidate)
        assert outcome.fell_back
        assert any("CUDA cannot start in the zygote's children" in n for n in outcome.notices), (
            outcome.notices
        )
        assert outcome.first(wire.Imported) is not None  # it ran, cold
    finally:
        ev.shutdown()


# --- hangs: bounded by the work -------------------------------------------------------------------------


def test_call_bounds_scale_with_the_reference() -> None:
    limits = Limits()
    assert call_bound(limits, None) == limits.call_timeout_min_s
    assert call_bound(limits, 0.001) == limits.call_timeout_min_s
    assert call_bound(limits, 2.0) == pytest.approx(limits.call_timeout_factor * 2.0)


def test_the_watchdog_moves_the_deadline_step_by_step() -> None:
    limits = Limits(eval_timeout_s=100, call_timeout_min_s=10, call_timeout_factor=50)  # bounds given below
    deadline = Deadline(limits.compile_timeout_s)
    dog = Watchdog(deadline, limits, {("case", "a"): 12.0, ("timing", "t"): 30.0})
    now = time.monotonic()
    dog.on_message(wire.Imported(seconds=0.1, has_model_new=True))
    assert deadline.at == pytest.approx(now + SETUP_S, abs=0.5)
    dog.on_message(wire.Start(kind="case", name="a"))
    assert deadline.at == pytest.approx(now + SETUP_S + 12.0, abs=0.5)
    dog.on_message(wire.Start(kind="timing", name="t"))
    dog.on_message(wire.Tick(name="t"))
    assert deadline.at == pytest.approx(now + 30.0, abs=0.5)
    dog.on_message(wire.Profiling(name="t"))
    assert "profiling t" in dog.explain()
    # the evaluation's budget stays the cap
    dog._allow("long step", 1000.0)
    assert deadline.at == pytest.approx(now + 100.0, abs=0.5)
    assert "budget of 100 s" in dog.explain()


def test_a_worker_under_a_sanitizer_has_the_tools_budget_for_its_data() -> None:
    """ASan slows the worker's own host code (torch building inputs) too: 5 s of setup was once too short on
    a busy CI machine for the honest baseline, which was then reported as not fully sanitized."""
    limits = Limits(eval_timeout_s=300, call_timeout_min_s=300)
    deadline = Deadline(limits.compile_timeout_s)
    dog = Watchdog(deadline, limits, {("case", "a"): 300.0}, budget_s=300.0)
    now = time.monotonic()
    dog.on_message(wire.Imported(seconds=0.1, has_model_new=True))
    assert deadline.at == pytest.approx(now + 300.0, abs=0.5)
    dog.on_message(wire.CaseDone(name="a", seconds=1.0, mutated=False))
    assert deadline.at - time.monotonic() > SETUP_S + 200


def test_a_worker_that_reported_done_has_time_to_exit() -> None:
    """After `done` only the worker's shutdown is left: a busy CI machine once took over 5 s there, and an
    honest candidate whose every result had arrived was reported as a timeout."""
    limits = Limits(eval_timeout_s=100, call_timeout_min_s=1)
    deadline = Deadline(limits.compile_timeout_s)
    dog = Watchdog(deadline, limits, {("timing", "t"): 1.0})
    dog.on_message(wire.Imported(seconds=0.1, has_model_new=True))
    dog.on_message(wire.Start(kind="timing", name="t"))
    dog.on_message(wire.Done())
    assert deadline.at - time.monotonic() == pytest.approx(EXIT_S, abs=0.5)
    assert EXIT_S > SETUP_S
    assert dog.explain() == f"the worker reported all its work done but did not exit within {EXIT_S:.0f} s"


def test_the_watchdogs_clocks_stop_while_the_parent_answers() -> None:
    """A worker waiting for its answer (the parent waits for the device) is not spending its bounds."""
    limits = Limits(eval_timeout_s=3, call_timeout_min_s=1, call_timeout_factor=50)
    deadline = Deadline(limits.compile_timeout_s)
    dog = Watchdog(deadline, limits, {("timing", "t"): 1.0})
    dog.on_message(wire.Imported(seconds=0.1, has_model_new=True))
    dog.on_message(wire.Start(kind="timing", name="t"))
    dog.on_message(wire.Tick(name="t"))
    before = deadline.at - time.monotonic()
    with dog.answering():
        time.sleep(1.5)  # past the step's bound of 1 s
        assert not deadline.expired
    assert deadline.at - time.monotonic() == pytest.approx(before, abs=0.2)
    dog._allow("long step", 1000.0)  # the evaluation's cap of 3 s moved by the 1.5 s waited: 3 s are left
    assert deadline.at - time.monotonic() == pytest.approx(3.0, abs=0.3)


@pytest.mark.slow
def test_a_call_that_never_returns_is_cut_off_by_its_bound(tiny: Problem, warm: WarmPool) -> None:
    """The evaluation's budget is 600 s; the hang is cut off after max(5 s, 50x the reference's call) plus
    the step's setup allowance, and the next candidate evaluates normally on the same evaluator."""
    patient = with_budget(tiny, 600)
    assert benchmark(patient, v.baseline(), pool=warm).status == "ok"  # built, reference timed
    start = time.monotonic()
    hung = benchmark(patient, v.host_loop(), pool=warm)
    waited = time.monotonic() - start
    assert hung.status == "timeout", hung.message
    assert "did not finish within its bound" in hung.message, hung.message
    assert waited < 45, f"{waited:.0f} s to a verdict"
    after = benchmark(patient, v.baseline(), pool=warm)
    assert after.status == "ok", after.message


# --- clock disagreements: like with like, re-measured, suspect ------------------------------------------


def _stats(**kw: Any) -> TimingStats:
    base = {"median_ms": 1.988, "rse": 0.01, "n": 50, "min_ms": 1.9, "max_ms": 2.2, "mean_ms": 2.0}
    base |= {"batch_ms": 150.0, "parent_batch_ms": 150.4}
    return TimingStats.model_validate(base | kw)


def test_host_overhead_alone_is_no_disagreement() -> None:
    """The false verdict seen on a busy H200: host clock 4.355 ms against 1.988 ms of CUDA events. The host
    clock was slow, but nothing ran after the end event: no disagreement."""
    assert clock_disagreement("s", _stats(host_median_ms=4.355, escaped_median_ms=0.006)) is None


def test_work_after_the_end_event_is_a_disagreement() -> None:
    """An unjoined side stream measured on the H200: 0.905 ms of events, 1.18 ms after the end event."""
    why = clock_disagreement("s", _stats(median_ms=0.905, host_median_ms=2.163, escaped_median_ms=1.18))
    assert why is not None
    assert "escaped the timed stream" in why


def test_a_faked_in_process_clock_is_a_disagreement() -> None:
    why = clock_disagreement("s", _stats(clock="host", batch_ms=16.0, parent_batch_ms=160.3))
    assert why is not None
    assert "faked" in why


def _late_batch_end(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """The evaluator's reader thread stamps the end of the timed loop late, `times` times: what a harness
    host too busy to wake that thread does to the evaluator's clock. Late by the loop's own length plus
    0.1 s, so the evaluator's clock reads twice the loop however slowly this machine runs it."""
    real = _verdicts.Verdicts.handle
    late = [0]
    began: dict[str, float] = {}

    def handle(self: _verdicts.Verdicts, msg: wire.WorkerMessage) -> str | None:
        if isinstance(msg, wire.BatchBegin):
            began[msg.name] = time.monotonic()
        if isinstance(msg, wire.BatchEnd) and late[0] < times:
            late[0] += 1
            time.sleep(time.monotonic() - began.get(msg.name, time.monotonic()) + 0.1)
        return real(self, msg)

    monkeypatch.setattr(_verdicts.Verdicts, "handle", handle)
    return late


def test_a_disagreement_the_host_caused_once_is_re_measured_and_not_flagged(
    tiny: Problem, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert benchmark(tiny, v.baseline(), pool=warm).status == "ok"
    late = _late_batch_end(monkeypatch, times=1)
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert late[0] == 1
    assert result.status == "ok", result.message
    assert result.flags == []
    assert result.speedup is not None
    assert any("re-measured in a fresh worker" in n for n in result.notices), result.notices
    assert "remeasure" in result.phases


def test_a_disagreement_that_persists_is_suspect_not_incorrect(
    tiny: Problem, warm: WarmPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    _late_batch_end(monkeypatch, times=2)
    result = benchmark(tiny, v.baseline(), pool=warm)
    assert result.status == "suspect", result.message
    assert not result.correct
    assert result.speedup is None
    assert result.flags == ["timing_mismatch"]
    assert not result.flag_details[0].disqualifying
    assert all(c.status == "passed" for c in result.cases)
    assert result.message.startswith("suspect:"), result.message


# --- workers made ahead of need ------------------------------------------------------------------------


def test_a_worker_still_being_made_takes_the_order_that_arrives_for_it(tiny: Problem, warm: WarmPool) -> None:
    """The worker made ahead (a CUDA context and the profiler on a GPU, ~4.5 s) may still be starting when
    its candidate arrives: the zygote hands the order over at once and closes its end; the worker must
    still run it. (Seen on the H200: every back-to-back evaluation crashed with exit 70.)"""
    for seed in range(2):
        assert benchmark(tiny, v.baseline(), pool=warm).status == "ok"  # truth and a worker made ahead
        warm.wait_prefetch(tiny.data_hash)
        # A seeded evaluation takes that worker but not the truth made ahead (its seed is given) ...
        assert benchmark(tiny, v.baseline(), seed=1_000_000_007 + seed, pool=warm).status == "ok"
        # ... so the next one finds its truth ready and no worker: one is asked for as it starts, and its
        # order follows at once, while that worker is still entering its namespaces.
        result = benchmark(tiny, v.baseline(), pool=warm)
        assert result.status == "ok", result.message


def test_compiles_never_take_the_worker_made_for_the_next_evaluation(tiny: Problem, warm: WarmPool) -> None:
    from tools import compile_kernel

    assert benchmark(tiny, v.baseline(), pool=warm).status == "ok"
    warm.wait_prefetch(tiny.data_hash)
    zygote = warm.zygote()
    assert zygote.wait_prepared(30)
    made = set(zygote.prepared_pids)
    assert len(made) == 1
    assert compile_kernel(tiny, v.python_only_edit(), pool=warm).status == "ok"
    assert zygote.prepared_pids == made  # neither used by the compile nor killed by its sweep
    assert Path(f"/proc/{next(iter(made))}").exists()


# --- the wire ------------------------------------------------------------------------------------------


def test_worker_messages_are_validated_where_they_are_read() -> None:
    """A line that is not a known message of the right shape is no message: counted, never trusted."""
    good = wire.CaseDone(name="odd", seconds=0.1, mutated=False).model_dump_json()
    assert isinstance(wire.parse_worker_message(good), wire.CaseDone)
    assert wire.parse_worker_message('{"event": "case_done", "name": "odd"}') is None  # fields missing
    assert wire.parse_worker_message('{"event": "verdict", "correct": true}') is None  # no such message
    forged = wire.CaseDone(name="odd", seconds=0.1, mutated=False).model_dump() | {"passed": True}
    assert wire.parse_worker_message(json.dumps(forged)) is None  # extra fields are not carried along
    assert wire.parse_worker_message("not json") is None


# --- a CUDA worker's start holds nothing ----------------------------------------------------------------

STAMPED = """import time

import torch

print("kernel-agent-test: imported at", time.time(), flush=True)


class ModelNew(torch.nn.Module):
    def forward(self, *inputs):
        return inputs[0]
"""


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "held-from-start"])
def test_a_gated_cuda_worker_imports_its_candidate_only_once_granted_the_device(
    tiny: Problem, warm: WarmPool, gated: bool
) -> None:
    """A CUDA worker not made ahead spent 1.5-4.2 s starting CUDA, cuBLAS and the profiler while its evaluation
    held the device shared, and every other evaluation's timed loop waited (H100, 4d5cf86, 2026-12-07). Where
    the harness gates its start, the worker asks for the device before the candidate's first line runs, and
    the import waits for the grant; where it does not (the sanitizer's, the profile's, a re-measurement's
    worker), the harness holds the device from the start and the worker asks nothing before its import."""
    cuda = tiny.model_copy(update={"spec": tiny.spec.model_copy(update={"device": "cuda"})})
    seen: list[str] = []
    granted: list[float] = []

    def handle(msg: wire.WorkerMessage) -> str | None:
        seen.append(type(msg).__name__)
        if isinstance(msg, wire.DeviceWanted):
            time.sleep(0.5)  # the device busy with another evaluation's timed loop
            granted.append(time.time())
            return "granted"
        return None

    with Job.create(STAMPED, warm.jobs_dir) as job:
        request = orders.CandidateRequest(mode="bench", device_gated=gated)
        outcome = run_candidate(job, cuda, request, on_message=handle, launcher=warm.launch_candidate)
    assert "Imported" in seen, (seen, outcome.output[-2000:])
    stamp = re.search(r"kernel-agent-test: imported at ([\d.]+)", outcome.output)
    assert stamp is not None, outcome.output[-2000:]
    if gated:
        assert seen.index("DeviceWanted") < seen.index("Imported"), seen
        assert float(stamp.group(1)) >= granted[0]
    else:
        assert "DeviceWanted" not in seen[: seen.index("Imported")], seen
