"""The host time to a forward's first kernel launch, from a profile's host events: pure, so the worker
(tools/worker/usage.py) and the bench (bench/first_launch.py, which imports no worker code) read it alike."""

from __future__ import annotations

from typing import Any

# The host's launch calls (the CUDA runtime's and the driver's, as the profiler names them): the first one in
# the forward is its first kernel launch.
LAUNCHES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)
REGION = "kernel_agent::forward"


def first_launch(events: list[tuple[str, float]]) -> dict[str, Any]:
    """Host ms from the forward's start (`REGION`'s) to the first launch call after it, from the profiler's
    (name, host start in us) pairs: what a timed call pays on the host before the device has work, where the
    device sits idle inside the clock (the timing loop synchronizes just before it; tools/worker/timing.py)."""
    start = min((t for name, t in events if name == REGION), default=None)
    launches = [t for name, t in events if name.startswith(LAUNCHES) and start is not None and t >= start]
    if start is None or not launches:
        return {"first_launch": "unavailable", "first_launch_ms": None}
    return {"first_launch": "measured", "first_launch_ms": (min(launches) - start) / 1e3}
