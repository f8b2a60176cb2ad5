"""The launch hold on the device (tools/worker/hold.py): each timed call's launches queue behind one kernel
that fills every SM, so the events time the call's device work and not the host's path to its first launch;
a call's figure is still never shorter than the host's time to issue it; and work put on another stream,
which does not wait for the hold, cannot run ahead of the clock.

Each test times calls with the loop itself (tools/worker/timing.py `measure`), no worker: seconds each.
Run on the GPU: `python -m pytest -m gpu tests/adversarial/gpu/test_gpu_hold.py` (skipped without one).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch

from tests.adversarial.gpu.test_gpu_exploits import record_figure
from tools.results import TimingStats
from tools.worker import hold
from tools.worker.timing import measure

pytestmark = pytest.mark.gpu


def timed(call: Callable[[int], object], calls: int = 15) -> TimingStats:
    samples = measure(
        call, lambda _i: None, device="cuda", warmup=3, min_iters=calls, max_iters=calls, target_rse=0.0,
        max_seconds=30.0,
    )  # fmt: skip
    assert samples.hold == "ok", samples.hold
    return TimingStats.model_validate(samples.stats())


def spin_host(ms: float) -> None:
    """Host work that keeps the core busy (the forward's Python before its first launch, at its slowest)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


@pytest.fixture(scope="module")
def square() -> torch.Tensor:
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.randn(4096, 4096, device="cuda")  # an fp32 matmul of it: ~2-3 ms on an H100 or H200


def test_the_hosts_path_before_the_first_launch_is_not_in_the_figure(square: torch.Tensor) -> None:
    plain = timed(lambda _i: square @ square)

    def slow_to_launch(_i: int) -> object:
        spin_host(0.3)
        return square @ square

    late = timed(slow_to_launch)
    record_figure("hold: matmul", plain.median_ms)
    record_figure(
        "hold: matmul after 0.3 ms on the host", late.median_ms, exposed=late.exposed_launch_median_ms
    )
    assert (late.launch_median_ms or 0.0) >= 0.3
    assert late.median_ms < plain.median_ms + 0.1, late  # without the hold: plain + 0.3 ms
    assert (late.exposed_launch_median_ms or 0.0) < 0.05, late
    assert (late.host_bound_calls or 0) <= 1  # a host hiccup now and then


def test_a_call_slower_to_issue_than_to_run_is_timed_by_the_host(square: torch.Tensor) -> None:
    small = square[:256, :256].contiguous()

    def host_work(_i: int) -> object:
        spin_host(2.5)  # beyond HOLD_MAX_MS: not held, and past the hold anyway its figure is the host's
        return small @ small

    stats = timed(host_work)
    assert stats.median_ms >= 2.5
    assert stats.hold_median_ms == 0.0  # not held: the device waits for the host inside the events


def test_host_work_under_the_hold_still_counts(square: torch.Tensor) -> None:
    """A result computed on the host while the stream is held (1 ms, inside the ~1.5 ms hold): the device
    has nothing to time but a copy, and the figure is the host's 1 ms."""
    small = square[:64, :64].contiguous()

    def on_the_host(_i: int) -> object:
        spin_host(1.0)
        return small.clone()

    stats = timed(on_the_host)
    assert (stats.hold_median_ms or 0.0) >= 1.0
    assert stats.median_ms >= 1.0


@pytest.mark.gate
def test_work_on_a_side_stream_cannot_run_ahead_of_the_hold(square: torch.Tensor) -> None:
    """The exploit the hold would open with a one-thread spin: launch the work on a stream that does not wait
    for the hold, keep the host busy so that the hold is long, then join. The work would run under the hold,
    before the start event. The hold fills every SM, so it starts only when the hold ends."""
    plain = timed(lambda _i: square @ square).median_ms
    side = torch.cuda.Stream()

    def ahead(_i: int) -> object:
        with torch.cuda.stream(side):
            out = square @ square
        spin_host(1.0)  # the next hold ~1.5 ms: most of the matmul would fit under it
        torch.cuda.current_stream().wait_stream(side)
        out.record_stream(torch.cuda.current_stream())
        return out

    stats = timed(ahead)
    record_figure("hold: matmul on a side stream, launched 1 ms ahead", stats.median_ms, plain=plain)
    assert (stats.hold_median_ms or 0.0) >= 1.0
    assert stats.median_ms >= 0.9 * plain, (stats, plain)


def test_the_hold_fills_every_sm() -> None:
    loaded = hold.load()
    assert loaded is not None
    props = torch.cuda.get_device_properties(0)
    assert (
        loaded.blocks * loaded.threads == props.multi_processor_count * props.max_threads_per_multi_processor
    )
