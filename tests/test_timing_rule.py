"""When a timing loop stops (tools/worker/timing.py): on the GPU, once the median's error estimated from the
median absolute deviation is under the target, so a few slow calls do not keep a tight loop going; on the
host clock, by the standard deviation, where a loaded machine's slow calls are what it measures."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tools.worker.timing import measure, median_rse, robust_median_rse


def test_on_normal_samples_the_two_estimates_agree() -> None:
    rng = random.Random(7)
    samples = [rng.gauss(1.0, 0.02) for _ in range(2000)]
    assert robust_median_rse(samples) == pytest.approx(median_rse(samples), rel=0.1)


def test_a_few_slow_calls_widen_the_standard_deviations_estimate_not_the_robust_one() -> None:
    """The H200's primary shape: calls within 1.5 % of the median and a tail past it (0.454-0.684 ms)."""
    rng = random.Random(3)
    samples = [0.47 * (1 + rng.uniform(-0.015, 0.015)) for _ in range(18)] + [0.68, 0.66]
    assert median_rse(samples) > 0.01  # the loop would go on to its most calls
    assert robust_median_rse(samples) < 0.005


def test_too_few_samples_or_no_time_have_no_error_to_estimate() -> None:
    assert robust_median_rse([1.0]) == math.inf
    assert robust_median_rse([0.0, 0.0, 0.0]) == math.inf
    assert robust_median_rse([2.0, 2.0, 2.0, 5.0]) == 0.0  # most calls alike: the median is known


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_loop_with_every_fifth_call_slow_stops_at_its_fewest_calls() -> None:
    a = torch.randn(4096, 4096, device="cuda")  # ~3 ms a call: a steady one
    slow = {i for i in range(100) if i % 5 == 0}

    def call(i: int) -> object:
        if i in slow:
            torch.cuda._sleep(2_000_000)  # ~1 ms of spinning on the device: an outlier call
        return a @ a

    samples = measure(
        call, lambda i: None, device="cuda", warmup=2, min_iters=10, max_iters=100, target_rse=0.01,
        max_seconds=20.0,
    )  # fmt: skip
    assert len(samples.device_ms) == 10
    assert median_rse(samples.device_ms) > 0.01  # the standard deviation's rule would not have stopped
