"""A timed CUDA call's launches queued ahead of the clock (tools/worker/timing.py).

The loop flushes L2 and synchronizes before each timed call, so the device is idle when the start event is
recorded. Recorded at once, the events would then hold the host's whole path to the call's first launch (the
forward's Python, the binding, the allocator): 0.1-0.3 ms a call of the selective scan's best kernel, whose
kernels take ~0.4 ms, and more the colder the host's caches. So before the start event the loop queues a hold
a little longer than the host has lately taken to issue a call; the host issues the call meanwhile, and from
the start event the device runs its kernels back to back. NVBench's blocking kernel does the same.

The hold is one kernel that fills every SM: as many threads as an SM holds, each reading the global timer
until the hold is over (no memory traffic: L2 stays flushed). No block of another kernel can start anywhere
while it runs, so work the call puts on another stream, which does not wait for the hold, cannot run ahead of
the clock either. (A copy on another stream runs on a copy engine, not an SM: that it could move data ahead
of the clock is the hold's one opening; it computes nothing.)

The host's time is not dropped: a call's figure is the longer of its device time and the host's time to
issue it (`call_ms`), which is what a loop of such calls sustains. So work a candidate does on the host (a
result computed on the CPU, then copied) is timed by the host's clock, however long the hold.

A hold that takes longer than asked by more than OVERRUN_MS (and OVERRUN_SHARE of it) waited on work this
context's synchronize did not see (another context's, time-sliced in): that overrun is added to the call's
figure.

Where the host takes longer than the hold, the device waits for the rest inside the events, as without a
hold; `exposed_ms` says how much of the host's issue time the hold did not cover (from the hold's start on the
host, so an upper bound). Past HOLD_MAX_MS the host, not the device, sets the call's figure anyway, and no
hold is queued. Where the kernel cannot be loaded, `DeviceHold.status` says why and no call is held.
"""

from __future__ import annotations

import ctypes
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tools.worker import ptx

HOLD_MARGIN = 1.5  # the hold over the host's recent median time to issue a call
HOLD_PAD_MS = 0.03  # and a little more: the hold's own launch, a slower call now and then
HOLD_MAX_MS = 2.0  # a host slower than this sets the figure itself (call_ms): a hold would only cost time
RECENT = 5  # calls whose issue time sets the next hold
# A hold past its length by more than this (and OVERRUN_SHARE of it) waited on other work: charged. Its own
# launch through ctypes after its start event, and the start event's, make an honest hold run 0.02-0.04 ms
# long (H100, 2026-12-07); another context's work, time-sliced in, costs whole slices (milliseconds).
OVERRUN_MS = 0.1
OVERRUN_SHARE = 0.25

KERNEL = "kagent_hold"
PTX = b"""
.version 7.5
.target sm_75
.address_size 64

.visible .entry kagent_hold(
	.param .u64 kagent_hold_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b64 	%rd<6>;

	ld.param.u64 	%rd2, [kagent_hold_param_0];
	mov.u64 %rd3, %globaltimer;

$L__BB0_1:
	mov.u64 %rd4, %globaltimer;
	sub.s64 	%rd5, %rd4, %rd3;
	setp.lt.u64 	%p1, %rd5, %rd2;
	@%p1 bra 	$L__BB0_1;

	ret;
}
"""
BLOCKS_PER_SM = 2


def hold_ms(recent_launch_ms: Sequence[float]) -> float:
    """The hold before the next call, from the host's time to issue the last RECENT calls: 0 where there is
    nothing to go by or where the host is slower than HOLD_MAX_MS."""
    recent = list(recent_launch_ms)[-RECENT:]
    if not recent:
        return 0.0
    typical = statistics.median(recent)
    if typical > HOLD_MAX_MS:
        return 0.0
    return min(HOLD_MAX_MS, HOLD_MARGIN * typical + HOLD_PAD_MS)


@dataclass
class Held:
    """One hold queued: its start event and the host's clock when it was queued."""

    begin: Any  # torch.cuda.Event
    host_start: float
    elapsed: Callable[[Any, Any], float]
    requested_ms: float

    def device_ms(self, start: Any) -> float:
        """How long the stream was held: the hold's start event to the call's start event."""
        return self.elapsed(self.begin, start)

    def overrun_ms(self, start: Any) -> float:
        """How much longer than asked the hold took, where that is past OVERRUN_MS and OVERRUN_SHARE of the
        hold: charged to the call, whole. After the loop's device-wide synchronize nothing of this context
        runs, so a hold that long waited on work no clock of this context sees (another context's, time-sliced
        in), and that work may have been the call's."""
        over = self.device_ms(start) - self.requested_ms
        return over if over > max(OVERRUN_MS, OVERRUN_SHARE * self.requested_ms) else 0.0


@dataclass
class _Loaded:
    """The hold kernel in torch's context and its launch shape: every SM filled, BLOCKS_PER_SM blocks each."""

    kernel: ptx.Kernel
    blocks: int
    threads: int


_STATE: dict[str, _Loaded | str] = {}  # "hold": the loaded kernel, or why there is none


def load() -> _Loaded | None:
    """The kernel, loaded on first use: by a worker made ahead of its candidate before any candidate exists
    (tools/worker/usage.py `warm_up_cuda`), else by the first timing loop."""
    if "hold" not in _STATE:
        try:
            driver = ptx.Driver()
            sms = driver.attribute(ptx.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessors")
            per_sm = driver.attribute(
                ptx.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "threads per SM"
            )
            _STATE["hold"] = _Loaded(driver.load(PTX, KERNEL), BLOCKS_PER_SM * sms, per_sm // BLOCKS_PER_SM)
        except (OSError, AttributeError) as exc:
            _STATE["hold"] = f"unavailable: {exc}"
    found = _STATE["hold"]
    return found if isinstance(found, _Loaded) else None


class DeviceHold:
    """Queues holds on the current stream. The entry points are passed in: the timing loop's own, captured
    before any candidate was imported."""

    def __init__(
        self,
        event: Callable[..., Any],
        record: Callable[[Any], None],
        elapsed: Callable[[Any, Any], float],
        clock: Callable[[], float],
        stream: Callable[[], Any],
    ) -> None:
        self.event, self.record, self.elapsed, self.clock, self.stream = event, record, elapsed, clock, stream
        self.loaded = load()
        found = _STATE["hold"]
        self.status = "ok" if isinstance(found, _Loaded) else found

    def hold(self, ms: float) -> Held | None:
        """Queue a hold of `ms` (none where `ms` is 0 or the kernel is unavailable)."""
        if ms <= 0 or self.loaded is None:
            return None
        begin = self.event(enable_timing=True)
        host_start = self.clock()
        self.record(begin)
        ns = ctypes.c_uint64(int(ms * 1e6))
        params = (ctypes.c_void_p * 1)(ctypes.addressof(ns))
        stream = ctypes.c_void_p(self.stream().cuda_stream)
        k, blocks, threads = self.loaded.kernel, self.loaded.blocks, self.loaded.threads
        rc = k.launch(k.function, blocks, 1, 1, threads, 1, 1, 0, stream, params, None)  # type: ignore[operator]
        if rc != 0:
            self.loaded, self.status = None, f"failed: cuLaunchKernel returned CUresult {rc}"
            return None
        return Held(begin=begin, host_start=host_start, elapsed=self.elapsed, requested_ms=ms)
