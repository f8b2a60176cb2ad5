"""One timing loop for the candidate and the reference alike.

CUDA: a 256 MB write flushes L2 before every iteration, CUDA events bracket the call, and the host clock
measures the same call up to a device-wide synchronize (work left on a side stream shows there).
CPU: the host clock. Iterations stop once the median's relative standard error is under the target.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

L2_FLUSH_BYTES = 256 << 20
CPU_FLUSH_BYTES = 64 << 20


@dataclass
class Samples:
    device_ms: list[float]
    host_ms: list[float]
    clock: str

    def stats(self) -> dict[str, float | int | str | None]:
        main = self.device_ms if self.clock == "cuda_event" else self.host_ms
        med = statistics.median(main)
        return {
            "median_ms": med,
            "rse": median_rse(main),
            "n": len(main),
            "min_ms": min(main),
            "max_ms": max(main),
            "mean_ms": statistics.fmean(main),
            "host_median_ms": statistics.median(self.host_ms) if self.host_ms else None,
            "clock": self.clock,
        }


def median_rse(values: list[float]) -> float:
    """Relative standard error of the median (asymptotic: 1.2533·σ/√n / median)."""
    n = len(values)
    med = statistics.median(values)
    if n < 2 or med <= 0:
        return math.inf
    return 1.2533 * statistics.stdev(values) / math.sqrt(n) / med


def _find_reset_persisting_l2() -> Callable[[], object] | None:
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            return ctypes.CDLL(name).cudaCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            continue
    return None


def make_flusher(device: str) -> Callable[[], None]:
    """cudaCtxResetPersistingL2Cache first: lines marked persisting would otherwise survive the flush."""
    if device == "cuda":
        buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        reset = _find_reset_persisting_l2()

        def flush_cuda() -> None:
            if reset is not None:
                reset()
            buf.zero_()

        return flush_cuda
    cpu_buf = torch.empty(CPU_FLUSH_BYTES // 4, dtype=torch.float32)

    def flush_cpu() -> None:
        cpu_buf.fill_(1.0)

    return flush_cpu


def measure(
    call: Callable[[int], object],
    prepare: Callable[[int], None],
    *,
    device: str,
    warmup: int,
    min_iters: int,
    max_iters: int,
    target_rse: float,
    max_seconds: float,
) -> Samples:
    """Time `call(i)` after `prepare(i)`; both see the iteration index (warm-ups use negative ones)."""
    cuda = device == "cuda"
    flush = make_flusher(device)
    for i in range(warmup):
        prepare(-1 - i)
        call(-1 - i)
        if cuda:
            torch.cuda.synchronize()
    device_ms: list[float] = []
    host_ms: list[float] = []
    deadline = time.perf_counter() + max_seconds
    for i in range(max_iters):
        prepare(i)
        flush()
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            h0 = time.perf_counter()
            start.record()
            call(i)
            end.record()
            torch.cuda.synchronize()
            h1 = time.perf_counter()
            device_ms.append(start.elapsed_time(end))
        else:
            h0 = time.perf_counter()
            call(i)
            h1 = time.perf_counter()
        host_ms.append((h1 - h0) * 1e3)
        main = device_ms if cuda else host_ms
        if len(main) >= min_iters and median_rse(main) < target_rse:
            break
        if time.perf_counter() > deadline and len(main) >= 3:
            break
    return Samples(device_ms=device_ms, host_ms=host_ms, clock="cuda_event" if cuda else "host")
