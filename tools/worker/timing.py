"""One timing loop for the candidate and the reference alike.

CUDA: a 256 MB write flushes L2 before every iteration and CUDA events bracket the call. The host clock
then measures what the events cannot see, like with like: from the moment the end event has completed to
the end of a device-wide synchronize, minus what a second, idle device-wide synchronize costs right after
(the host's own overhead, which a loaded host inflates). An honest call leaves nothing after its end event,
so this `escaped` time is near zero however slow the host; work left on a side stream shows there in full.
The host clock over the whole call (`host_ms`) and the time to issue it (`launch_ms`) are recorded too.
The call's launches are queued ahead of the clock (tools/worker/hold.py): a kernel filling every SM holds
the stream a little longer than the host's recent time to issue a call, the start event follows it, so the
events see the call's own device time, not the host's path to its first launch; a call's figure is the
longer of that and the host's time to issue it (`call_ms`), so work done on the host in the call is timed.
CPU: the host clock. Iterations stop once the median's relative standard error is under the target: on
the GPU that error is estimated from the samples' median absolute deviation (`robust_median_rse`), so a
few slow calls (a clock step, another process's launch) do not keep a tight loop going: by the standard
deviation the H200's best kernel ran the most calls (100) at its primary shape, then the checks' extension
(82 more), at 1.5 % between its fastest and its median call. The `rse` reported stays the standard
deviation's, the cautious one.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tools.worker import hold as launch_hold
from tools.worker.l2 import L2Watch, find_runtime

# The clocks, taken when this module is imported: before any candidate is. The loop calls these
# references, never `time.perf_counter` or `torch.cuda.Event.elapsed_time` looked up at call time, so a
# candidate that patches those (even one that restores them before the identity check) times nothing.
_PERF_COUNTER = time.perf_counter
_EVENT = torch.cuda.Event
# A CPU build of torch has a `_CudaEventBase` placeholder without these methods: None, as without CUDA.
_EVENT_BASE = getattr(torch._C, "_CudaEventBase", None)
_RECORD = getattr(_EVENT_BASE, "record", None)
_ELAPSED: Callable[[torch.cuda.Event, torch.cuda.Event], float] | None = getattr(
    _EVENT_BASE, "elapsed_time", None
)
_EVENT_SYNC = getattr(_EVENT_BASE, "synchronize", None)
_SYNCHRONIZE = getattr(torch._C, "_cuda_synchronize", None)
_CURRENT_STREAM = torch.cuda.current_stream
# The launch hold (tools/worker/hold.py), its class and method and the rule for its length, taken the same way.
_HOLD, _HOLD_FOR, _HOLD_MS = launch_hold.DeviceHold, launch_hold.DeviceHold.hold, launch_hold.hold_ms
_OS_TIMES, _OS_OPEN, _OS_READ, _OS_CLOSE = os.times, os.open, os.read, os.close
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Persisting L2's reset and set-aside query (tools/worker/l2.py), found before the candidate can hide them.
_RESET_L2, _L2_LIMIT = find_runtime()

L2_FLUSH_BYTES = 256 << 20
# A judge may extend the loop past its own stop (tools/judge/_calls.py: at most max_iters + 8 more calls).
HARD_CAP_EXTRA = 16
CPU_FLUSH_BYTES = 64 << 20


@dataclass
class Samples:
    device_ms: list[float]
    host_ms: list[float]
    clock: str
    batch_ms: float = 0.0  # the whole timed loop (flushes and the harness's own work included), host clock
    escaped_ms: list[float] = field(default_factory=list)  # CUDA: host-clock time after the end event
    launch_ms: list[float] = field(default_factory=list)  # CUDA: host time to issue the call
    # CUDA: each call's figure, the longer of its device time (`device_ms`) and the host's time to issue it
    call_ms: list[float] = field(default_factory=list)
    hold_ms: list[float] = field(default_factory=list)  # CUDA: how long the stream was held before each call
    # CUDA: the host's issue time the hold did not cover
    exposed_ms: list[float] = field(default_factory=list)
    busy_elsewhere: float | None = None  # share of this process's CPUs other processes used during the loop
    l2_reset: str | None = None  # CUDA: "ok" where every flush followed a persisting-L2 reset, else why not
    l2_set_aside_bytes: int | None = None  # CUDA: the most L2 set aside for persisting lines after a call
    hold: str | None = None  # CUDA: "ok" where the launch hold could be queued, else why not

    @property
    def main(self) -> list[float]:
        """The figures the loop reports: each call's on CUDA, the host clock's elsewhere."""
        return self.call_ms if self.clock == "cuda_event" else self.host_ms

    def stats(self) -> dict[str, float | int | str | None]:
        main = self.main
        med = statistics.median(main)
        return {
            "escaped_median_ms": _median_or_none(self.escaped_ms),
            "launch_median_ms": _median_or_none(self.launch_ms),
            "launch_min_ms": min(self.launch_ms) if self.launch_ms else None,
            "event_median_ms": _median_or_none(self.device_ms) if self.clock == "cuda_event" else None,
            "hold_median_ms": _median_or_none(self.hold_ms),
            "exposed_launch_median_ms": _median_or_none(self.exposed_ms),
            "host_bound_calls": (
                sum(h > d for h, d in zip(self.launch_ms, self.device_ms, strict=True))
                if self.call_ms
                else None
            ),
            "busy_elsewhere": self.busy_elsewhere,
            "median_ms": med,
            "rse": median_rse(main),
            "n": len(main),
            "min_ms": min(main),
            "max_ms": max(main),
            "mean_ms": statistics.fmean(main),
            "host_median_ms": statistics.median(self.host_ms) if self.host_ms else None,
            "clock": self.clock,
            "batch_ms": self.batch_ms,
            "l2_reset": self.l2_reset,
            "l2_set_aside_bytes": self.l2_set_aside_bytes,
            "hold": self.hold,
        }


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def median_rse(values: list[float]) -> float:
    """Relative standard error of the median (asymptotic: 1.2533·σ/√n / median)."""
    n = len(values)
    med = statistics.median(values)
    if n < 2 or med <= 0:
        return math.inf
    return 1.2533 * statistics.stdev(values) / math.sqrt(n) / med


MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation over its median absolute deviation


def robust_median_rse(values: list[float]) -> float:
    """`median_rse` with the spread taken from the median absolute deviation: what the median's error is
    where the samples are normal, and not inflated by a few outliers, which move the median no more than
    any other sample above it."""
    n = len(values)
    med = statistics.median(values)
    if n < 2 or med <= 0:
        return math.inf
    mad = statistics.median(abs(v - med) for v in values)
    return 1.2533 * MAD_TO_SIGMA * mad / math.sqrt(n) / med


def _sync() -> None:
    """Device-wide synchronize through the C entry point captured at import."""
    if _SYNCHRONIZE is not None:
        _SYNCHRONIZE()
    else:
        torch.cuda.synchronize()


def _record(event: torch.cuda.Event) -> None:
    if _RECORD is not None:
        _RECORD(event, _CURRENT_STREAM())
    else:
        event.record()


def _wait(event: torch.cuda.Event) -> None:
    if _EVENT_SYNC is not None:
        _EVENT_SYNC(event)
    else:
        event.synchronize()


def _elapsed(start: torch.cuda.Event, end: torch.cuda.Event) -> float:
    return _ELAPSED(start, end) if _ELAPSED is not None else start.elapsed_time(end)


def make_flusher(device: str, l2: L2Watch | None = None) -> Callable[[], None]:
    """Persisting L2 lines reset first (`l2` records how that went): they would otherwise survive the flush."""
    if device == "cuda":
        buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

        def flush_cuda() -> None:
            if l2 is not None:
                l2.reset()
            buf.zero_()

        return flush_cuda
    cpu_buf = torch.empty(CPU_FLUSH_BYTES // 4, dtype=torch.float32)

    def flush_cpu() -> None:
        cpu_buf.fill_(1.0)

    return flush_cpu


def _busy_seconds(cpus: set[int]) -> float | None:
    """CPU seconds spent busy so far on `cpus` (Linux /proc/stat: all but idle and iowait), or None."""
    try:
        fd = _OS_OPEN("/proc/stat", os.O_RDONLY)
        try:
            text = _OS_READ(fd, 1 << 20).decode()
        finally:
            _OS_CLOSE(fd)
    except OSError:
        return None
    ticks = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            # user nice system idle iowait irq softirq steal (older kernels list fewer): all but idle, iowait
            fields = ([int(v) for v in rest.split()] + [0] * 8)[:8]
            ticks += sum(fields) - fields[3] - fields[4]
    return ticks / _CLK_TCK


class LoadMeter:
    """How much of this process's CPUs other processes kept busy over a span: the CPUs' busy time by
    /proc/stat less this process's own CPU time (all its threads), over the wall time and the CPU count.
    A loaded host slows the timed calls (the CPU problem's threads, a GPU candidate's launches) and the
    reference's alike only by chance: a speedup measured then is not a quiet machine's."""

    def __init__(self) -> None:
        self.cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
        self.start = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        busy = _busy_seconds(self.cpus) if self.cpus else None
        if busy is None:
            return None
        own = _OS_TIMES()
        return busy, own.user + own.system, _PERF_COUNTER()

    def share(self) -> float | None:
        end = self._read()
        if self.start is None or end is None or end[2] <= self.start[2]:
            return None
        others = (end[0] - self.start[0]) - (end[1] - self.start[1])
        return min(1.0, max(0.0, others / ((end[2] - self.start[2]) * len(self.cpus))))


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
    on_batch: Callable[[str], None] | None = None,
    proceed: Callable[[int, bool], bool] | None = None,
    after_call: Callable[[int], None] | None = None,
) -> Samples:
    """Time `call(i)` after `prepare(i)`; both see the iteration index (warm-ups use negative ones).

    `on_batch("begin")` / `on_batch("end")` bracket the timed loop: the parent stamps both with its own
    clock, which no code in this process can reach, and compares that wall time with `batch_ms`.
    `proceed(i, wants_stop)`, asked before each timed call, decides whether call `i` happens: the loop's
    own rule (target spread, time, count) only proposes the stop (the candidate's judge extends the loop
    past it to place its checks). Without it the rule decides, as for the reference. `after_call(i)` runs as
    soon as call `i` is issued and clocked: on CUDA after its end event is recorded, before the host waits for
    it (what it queues runs on the call's stream, ahead of anything launched later; tools/worker/late.py)."""
    cuda = device == "cuda"
    l2 = L2Watch(_RESET_L2, _L2_LIMIT) if cuda else None
    flush = make_flusher(device, l2)
    spin = _HOLD(_EVENT, _record, _elapsed, _PERF_COUNTER, _CURRENT_STREAM) if cuda else None
    warm_launch: list[float] = []  # the host's time to issue each warm-up call: the first hold's measure
    for i in range(warmup):
        prepare(-1 - i)
        h0 = _PERF_COUNTER()
        call(-1 - i)
        warm_launch.append((_PERF_COUNTER() - h0) * 1e3)
        if cuda:
            _sync()
    device_ms: list[float] = []
    host_ms: list[float] = []
    escaped_ms: list[float] = []
    launch_ms: list[float] = []
    call_ms: list[float] = []
    hold_ms: list[float] = []
    exposed_ms: list[float] = []
    if on_batch is not None:
        on_batch("begin")
    meter = LoadMeter()
    batch_start = _PERF_COUNTER()
    deadline = batch_start + max_seconds
    main = call_ms if cuda else host_ms
    spread = robust_median_rse if cuda else median_rse  # a loaded host's slow calls are its load: counted
    i = 0
    while i < 2 * max_iters + HARD_CAP_EXTRA:
        rule_stop = i >= max_iters or (len(main) >= min_iters and spread(main) < target_rse)
        rule_stop = rule_stop or (_PERF_COUNTER() > deadline and len(main) >= 3)
        if not (proceed(i, rule_stop) if proceed is not None else not rule_stop):
            break
        prepare(i)
        flush()
        if cuda:
            _sync()
            start, end = _EVENT(enable_timing=True), _EVENT(enable_timing=True)
            held = _HOLD_FOR(spin, _HOLD_MS(warm_launch[-1:] + launch_ms)) if spin is not None else None
            h0 = _PERF_COUNTER()
            _record(start)
            call(i)
            issued = _PERF_COUNTER()
            _record(end)
            if after_call is not None:
                after_call(i)
            _wait(end)
            end_done = _PERF_COUNTER()
            _sync()
            h1 = _PERF_COUNTER()
            _sync()  # nothing left to wait for: what a synchronize costs this host right now
            idle = _PERF_COUNTER() - h1
            if l2 is not None:
                l2.observe()
            device_ms.append(_elapsed(start, end))
            escaped_ms.append(max(0.0, (h1 - end_done) - idle) * 1e3)
            launch_ms.append((issued - h0) * 1e3)
            overrun = held.overrun_ms(start) if held is not None else 0.0
            call_ms.append(max(device_ms[-1], launch_ms[-1]) + overrun)
            hold_ms.append(held.device_ms(start) if held is not None else 0.0)
            issue_from = held.host_start if held is not None else h0
            exposed_ms.append(max(0.0, (issued - issue_from) * 1e3 - hold_ms[-1]))
        else:
            h0 = _PERF_COUNTER()
            call(i)
            h1 = _PERF_COUNTER()
            if after_call is not None:
                after_call(i)
        host_ms.append((h1 - h0) * 1e3)
        i += 1
    batch_ms = (_PERF_COUNTER() - batch_start) * 1e3
    busy_elsewhere = meter.share()
    if on_batch is not None:
        on_batch("end")
    return Samples(
        device_ms=device_ms,
        host_ms=host_ms,
        clock="cuda_event" if cuda else "host",
        batch_ms=batch_ms,
        escaped_ms=escaped_ms,
        launch_ms=launch_ms,
        call_ms=call_ms,
        hold_ms=hold_ms,
        exposed_ms=exposed_ms,
        busy_elsewhere=busy_elsewhere,
        l2_reset=l2.status() if l2 is not None else None,
        l2_set_aside_bytes=l2.set_aside if l2 is not None else None,
        hold=spin.status if spin is not None else None,
    )
