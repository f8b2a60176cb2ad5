"""How sure a speedup is: the 95 % interval of reference median / candidate median, from each median's
relative standard error (tools/worker/timing.py `median_rse`), on the log scale where a ratio's errors add.

The two medians come from separate loops (the reference's often from the cache, checked beside the
candidate by tools/judge/_paired.py), so each spread alone says how far timing noise within one loop
could move the ratio, not how far the machine's speed moved between the loops. Where the paired check
timed the reference again and the cached median stood (or, on a GPU, gave way: `window_drift` in
tools/judge/_paired.py), the two disagreed by some `drift`: it widens the interval by that much on each
side (the reference's median is known no better than the two windows agree). On the host's clock a loop
can also run slow for most of its calls and so move its own median: the CI machine's re-check of a CPU
kernel read 318.8 ms over 86 calls (fastest 198.8 ms) where the same kernel's other loops read
215-217 ms. A slow stretch only adds time, so the quiet machine's time lies between the fastest call and
the median: how far the median stands above the fastest call, past what a steady loop shows (`STEADY`),
widens the candidate's side upwards and the reference's downwards. An interval wider than `WIDE` (high /
low) is too wide to rank a kernel against one inside it: the text says so.
"""

from __future__ import annotations

import math

from tools.results import TimingStats

Z95 = 1.959964
WIDE = 1.25  # high / low of the interval past which two kernels inside it are not told apart
MAX_LOG_FACTOR = 50.0  # e^50 ~ 5e21: far past WIDE, far below overflow (e^709)
STEADY = 1.10  # median / fastest call of a steady host-clock loop, at most (this machine: 1.01-1.05)


def slow_stretch(stats: TimingStats) -> float:
    """|log| of how much more than a steady loop's the host-clock median stood above the fastest call:
    how far a slow stretch of the loop may have moved the median. 0 on a device's clock (the events time
    the device, which a slow host does not slow) and for a steady loop."""
    if stats.clock != "host" or stats.min_ms <= 0:
        return 0.0
    return max(0.0, math.log(stats.median_ms / stats.min_ms / STEADY))


def speedup_interval(
    reference: TimingStats, candidate: TimingStats, drift: float = 0.0
) -> tuple[float, float] | None:
    """(low, high) of the speedup at 95 %, or None where a spread is unknown (fewer than two calls).
    `drift`: |log| of how far the reference timed again beside the candidate was from `reference`."""
    if not (math.isfinite(reference.rse) and math.isfinite(candidate.rse)) or candidate.median_ms <= 0:
        return None
    ratio = reference.median_ms / candidate.median_ms
    half = Z95 * math.hypot(reference.rse, candidate.rse) + abs(drift)
    return scaled(ratio, -half - slow_stretch(reference)), scaled(ratio, half + slow_stretch(candidate))


def scaled(ratio: float, log_factor: float) -> float:
    """ratio * e^log_factor, the exponent bounded: a candidate whose timed calls mostly return at once (a
    cache, skipped work) has a median near 0 and a spread of millions, and e^that overflowed: the
    evaluator failed with OverflowError instead of giving a verdict (found by `agent redteam`'s
    warmup-detector). Bounded, such an interval is simply too wide."""
    return ratio * math.exp(max(-MAX_LOG_FACTOR, min(MAX_LOG_FACTOR, log_factor)))


def too_wide(interval: tuple[float, float] | None) -> bool:
    return interval is not None and interval[0] > 0 and interval[1] / interval[0] > WIDE
