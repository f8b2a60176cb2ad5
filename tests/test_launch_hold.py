"""The launch hold's rule and what it reports, on the CPU (tools/worker/hold.py; on the device:
tests/adversarial/gpu/test_gpu_hold.py)."""

from __future__ import annotations

import pytest

from tools.benchmark import host_note
from tools.results import TimingStats
from tools.worker import hold
from tools.worker.timing import Samples


def test_the_hold_outlasts_the_hosts_recent_issue_time() -> None:
    assert hold.hold_ms([]) == 0.0  # nothing to go by: the first call is not held
    assert hold.hold_ms([0.2]) == pytest.approx(hold.HOLD_MARGIN * 0.2 + hold.HOLD_PAD_MS)
    # the median of the last RECENT calls: one slow call does not stretch every hold after it
    assert hold.hold_ms([5.0, 0.2, 0.2, 0.3, 0.2, 0.2]) == pytest.approx(
        hold.HOLD_MARGIN * 0.2 + hold.HOLD_PAD_MS
    )
    assert hold.hold_ms([1.9]) == hold.HOLD_MAX_MS  # capped
    assert hold.hold_ms([2.5]) == 0.0  # the host sets such a call's figure: no hold


def test_without_a_gpu_the_hold_says_why_and_holds_nothing() -> None:
    spin = hold.DeviceHold(lambda **_k: None, lambda _e: None, lambda _a, _b: 0.0, lambda: 0.0, lambda: None)
    if spin.status == "ok":
        pytest.skip("a CUDA driver is present: tests/adversarial/gpu/test_gpu_hold.py covers it")
    assert spin.status.startswith("unavailable: ")
    assert spin.hold(0.5) is None


def cuda_samples(device: list[float], launch: list[float]) -> Samples:
    return Samples(
        device_ms=device, host_ms=[d + 0.01 for d in device], clock="cuda_event", launch_ms=launch,
        call_ms=[max(d, h) for d, h in zip(device, launch, strict=True)], hold_ms=[0.4] * len(device),
        exposed_ms=[0.0] * len(device), hold="ok",
    )  # fmt: skip


def test_a_calls_figure_is_the_longer_of_its_device_and_issue_times() -> None:
    stats = cuda_samples([0.40, 0.41, 0.42], [0.30, 0.50, 0.20]).stats()
    assert stats["median_ms"] == pytest.approx(0.42)  # of 0.40, 0.50, 0.42
    assert stats["event_median_ms"] == pytest.approx(0.41)
    assert stats["host_bound_calls"] == 1  # the call whose issue took longer than its events
    assert stats["hold"] == "ok"
    assert (stats["launch_median_ms"], stats["launch_min_ms"]) == pytest.approx((0.30, 0.20))


def test_a_charged_overrun_does_not_make_a_call_host_bound() -> None:
    samples = cuda_samples([0.40, 0.41], [0.30, 0.30])
    samples.call_ms = [0.40 + 0.5, 0.41]  # the first hold ran 0.5 ms long: charged, the host kept up
    stats = samples.stats()
    assert stats["host_bound_calls"] == 0
    assert stats["median_ms"] == pytest.approx((0.90 + 0.41) / 2)


def test_the_model_is_told_when_the_host_set_the_figure() -> None:
    bound = TimingStats.model_validate(cuda_samples([0.05] * 4, [0.30] * 4).stats())
    assert host_note(bound) == (
        " [host-bound: issuing a call took 0.300 ms, its device work 0.050 ms; the figure is the host's]"
    )
    device = TimingStats.model_validate(cuda_samples([0.40] * 4, [0.30] * 4).stats())
    assert host_note(device) == ""
    cpu = TimingStats(median_ms=1.0, rse=0.01, n=5, min_ms=0.9, max_ms=1.1, mean_ms=1.0, clock="host")
    assert host_note(cpu) == ""


def test_a_hold_that_ran_long_is_charged_to_the_call() -> None:
    """A hold far past its length waited on work nothing else clocks: that time is the call's."""

    def held_for(ms: float) -> hold.Held:
        return hold.Held(begin="begin", host_start=0.0, elapsed=lambda _a, _b: ms, requested_ms=0.5)

    assert held_for(0.54).overrun_ms("start") == 0.0  # its own launch, the start event's: not charged
    assert held_for(0.62).overrun_ms("start") == 0.0  # within OVERRUN_MS
    assert held_for(3.0).overrun_ms("start") == pytest.approx(2.5)  # a time slice of other work: all of it


def test_the_worker_waits_for_its_parents_answer_on_a_busy_core() -> None:
    """The worker polls for the judge's answer before it blocks (tools/worker/candidate.py `JudgeLink.ask`):
    not readable, the poll gives up after its time; once a line is there, it sees it at once."""
    import os
    import time

    from tools.worker.candidate import answer_ready

    read, write = os.pipe()
    try:
        start = time.perf_counter()
        assert not answer_ready(read, 0.02)
        assert time.perf_counter() - start >= 0.02
        os.write(write, b"go 0 -\n")
        assert answer_ready(read, 5.0)
    finally:
        os.close(read)
        os.close(write)
