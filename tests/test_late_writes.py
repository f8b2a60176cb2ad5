"""Work finished after its call had ended, before the harness read the output (issue 52; GUIDE §2 rows 8, 12
and 25): right after each timed call the values at secret positions of its output are copied
(tools/worker/late.py, through `timing.measure(after_call=)`), and when the output is read they must be
unchanged. On the CPU here: the snapshot itself, the loop's hook timed against a thread that writes between
the call and the read, the judge's verdict, and a whole evaluation of a candidate that leaves each timed
call's work to a thread. On the GPU: tests/adversarial/gpu/test_gpu_guards.py."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from tests.adversarial import cpu_candidates as c
from tests.helpers import TINY
from tools import benchmark
from tools.judge._device_guards import device_disagreement, late_disagreement
from tools.problem import Problem, load_problem
from tools.results import TimingStats
from tools.worker import timing
from tools.worker.late import SAMPLES, LateWrites


@pytest.fixture(scope="module")
def tiny() -> Problem:
    return load_problem(TINY)


def test_an_output_that_holds_still_is_no_late_write_and_one_that_changes_is() -> None:
    late = LateWrites()
    out = torch.randn(1000)
    out[::7] = float("nan")  # NaN for NaN is unchanged
    late.snapshot(out)
    late.check(out)
    assert late.late == 0
    late.snapshot(out)
    out.add_(1.0)
    late.check(out)
    assert late.late == 1
    late.check(out)  # no snapshot left: nothing to compare
    late.snapshot("not a tensor")
    late.check("not a tensor")
    assert late.late == 1


def test_the_positions_are_fresh_for_every_call_and_secret_per_loop() -> None:
    out = torch.arange(100_000, dtype=torch.float32)
    first, second = LateWrites(), LateWrites()
    seen = []
    for late in (first, first, second):
        late.snapshot(out)
        assert late._snap is not None
        seen.append(late._snap[1])
        assert seen[-1].numel() == SAMPLES
    assert not torch.equal(seen[0], seen[1])  # a new draw each call
    assert not torch.equal(seen[0], seen[2])  # another loop's seed


def run_loop(delay_s: float, read_after_s: float) -> LateWrites:
    """The timing loop as the candidate worker drives it: the output of each call is read when the next
    `proceed` is asked (after a round trip of `read_after_s`), its snapshot taken by `after_call`. Each call
    returns zeros that a thread fills with ones `delay_s` after the call returned (0: inside the call)."""
    late, current = LateWrites(), {}

    def call(i: int) -> object:
        out = torch.zeros(4096)
        if delay_s == 0:
            out.fill_(1.0)
        else:
            threading.Timer(delay_s, out.fill_, args=(1.0,)).start()
        current["out"] = out
        return out

    def proceed(i: int, wants_stop: bool) -> bool:
        if "out" in current:
            time.sleep(read_after_s)
            late.check(current["out"])
        return i < 5

    timing.measure(
        call, lambda i: None, device="cpu", warmup=0, min_iters=5, max_iters=5, target_rse=0.0,
        max_seconds=10.0, proceed=proceed, after_call=lambda i: late.snapshot(current["out"]),
    )  # fmt: skip
    return late


def test_a_write_after_the_call_and_before_the_read_is_a_late_write() -> None:
    assert run_loop(delay_s=0.01, read_after_s=0.2).late == 5
    assert run_loop(delay_s=0, read_after_s=0.2).late == 0  # written inside the call: holds still


def test_the_judge_treats_late_writes_as_a_disagreement_of_the_clocks() -> None:
    base = {"median_ms": 1.0, "rse": 0.01, "n": 12, "min_ms": 1.0, "max_ms": 1.0, "mean_ms": 1.0}
    why = late_disagreement("small", TimingStats(**base, late_writes=3))
    assert why is not None
    assert why.startswith("small: the output of 3 of 12 timed calls changed after the call had ended")
    assert device_disagreement("small", TimingStats(**base, late_writes=3)) == why
    assert late_disagreement("small", TimingStats(**base, late_writes=0)) is None
    assert late_disagreement("small", TimingStats(**base)) is None  # a loop that did not count them


def test_work_left_to_a_thread_right_after_each_timed_call_gets_no_speedup(tiny: Problem) -> None:
    """Honest in the cases; while timed, a thread finishes each output just after its call. Whether the
    thread is done when the harness reads the output (a late write: `suspect`, timing_mismatch) or not (a
    stale output: the timed re-check or the fingerprints, `incorrect`), no clock counts the work as fast."""
    result = benchmark(tiny, c.finished_just_after_return(len(tiny.correctness_cases)))
    assert all(x.status == "passed" for x in result.cases), result.message
    assert result.status in ("suspect", "incorrect"), result.message
    assert result.speedup is None
    assert set(result.flags) & {"timing_mismatch", "timed_output_mismatch"}, result.message
    # On a loaded host the profiled call may also end before the thread's work: no own kernel ran in forward,
    # another true catch of the same cheat (failed only so in the fast tier at load 3, 2026-12-06).
    caught = {"timing_mismatch", "timed_output_mismatch", "spawns_workers", "no_custom_kernel"}
    assert set(result.flags) <= caught, result.message


def test_the_snapshot_and_its_check_are_checked_for_tampering(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.worker import candidate

    assert candidate.tampered_timers() == []
    monkeypatch.setattr(LateWrites, "check", lambda self, out: None)
    assert candidate.tampered_timers() == ["tools.worker.late.LateWrites.check"]
