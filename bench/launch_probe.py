"""Where a selective-scan kernel's forward waits on the host, on a GPU: not a test, a measurement.

    python -m bench.launch_probe KERNEL.py [KERNEL.py ...] [--calls 120] [--json OUT]

For each kernel file (a module defining ModelNew, built by its own load_inline), at the primary shape
(16, 1024, 1024, 16):
  timeline    one forward under torch.profiler after an L2 flush: each GPU kernel's start and end and the
              host's launch calls, from the first kernel's start, so an idle GPU between kernels shows
  loops       the timed loop with the same input every call ("same"), then as the evaluator feeds it
              ("fresh": a new rolled copy of the input each call, the last 31 kept alive, a NaN block
              allocated and freed before the call); both again after one CUDA profiler session, as the
              evaluator's worker runs one while it warms up; with --guard, both again under the worker's
              audit hook; with fresh inputs after the core slept, or spun, PAUSE_MS before each call
              (does an idle core make the launch path slow?), and with the persisting-L2 reset the
              evaluator makes before each flush (does it?); as the worker waits on its parent, a round
              trip to a child process that answers ECHO_MS later before each call, alone and with the
              worker's reads of the previous output (a fingerprint summed on the device and read back);
              after 64 MB of host memory written before each call (the core's caches cold, as after the
              worker's bookkeeping); behind a held stream (the evaluator's launch hold); through the
              evaluator's own timing loop (tools/worker/timing.py `measure`) in this plain process; with
              --contain, again under the worker's old containment (seccomp through prctl, no capabilities).
              Each loop reports the CUDA-event median, the host's time to issue one forward (median and
              quickest), and how many cudaMalloc/cudaFree calls and allocator retries it made
Why: on the H200 (bench/results/h200/2026-12-01e) step 09's kernels summed to 381 µs, yet the evaluator
timed 0.46-0.51 ms. The evaluator's `launch_median_ms` was 0.19-0.31 ms, where a plain loop issued the
same forward in 0.085 ms, and the one-forward timeline showed the GPU idle 151 µs between the split and
the GEMM.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from tools.worker.l2 import find_runtime  # ctypes only: no torch state of its own

SHAPE = (16, 1024, 1024)
D_STATE = 16
PAUSE_MS = 3.0  # a worker's wait for its parent's reply before a timed call, roughly
ECHO_MS = 0.3  # the parent's time to answer a worker's next_call, roughly
HOLD_MS = 0.6  # the evaluator's hold at shape 1 on the H100 (1.5x the worker's issue time + 0.03 ms)
CLOCK_HZ = 1.98e9  # torch.cuda._sleep counts SM cycles: roughly the H100's and H200's boost clock
EVICT_BYTES = 64 << 20  # more than a core's share of the last-level cache
EVICT: dict[str, torch.Tensor] = {}
KEEP = 31  # inputs kept alive, as the evaluator keeps 2 GB of them at this shape (tools/worker/candidate.py)


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"probe_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timeline(model: torch.nn.Module, x: torch.Tensor, flush: torch.Tensor) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile, record_function

    flush.zero_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        with record_function("forward"):  # the host's entry into the forward, on the same clock
            model(x)
        torch.cuda.synchronize()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    # kernels and copies only: torch 2.11 puts the record_function range on the device's timeline too
    gpu = [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    ]
    t0 = gpu[0].time_range.start if gpu else 0
    rows = [
        {
            "on": "gpu",
            "start_us": e.time_range.start - t0,
            "end_us": e.time_range.end - t0,
            "name": e.name[:90],
        }
        for e in gpu
    ]
    launches = [
        e
        for e in events
        if e.device_type == torch.autograd.DeviceType.CPU and ("aunch" in e.name or e.name == "forward")
    ]
    rows += [
        {
            "on": "cpu",
            "start_us": e.time_range.start - t0,
            "end_us": e.time_range.end - t0,
            "name": e.name[:90],
        }
        for e in launches
    ]
    return rows


def pause(kind: str, ms: float) -> None:
    """What the host does before a call is prepared: `sleep` leaves the core idle (as a worker blocked on
    its parent's reply does), `spin` keeps it busy for the same time, `evict` writes EVICT_BYTES of host
    memory (the core's caches then hold none of the forward's host path, as after a worker's bookkeeping)."""
    if kind == "evict":
        EVICT.setdefault("buf", torch.empty(EVICT_BYTES // 4)).fill_(1.0)
    elif kind == "sleep":
        time.sleep(ms / 1e3)
    elif kind == "spin":
        until = time.perf_counter() + ms / 1e3
        while time.perf_counter() < until:
            pass


def fresh_input(base: torch.Tensor, i: int, keep: collections.deque[torch.Tensor]) -> torch.Tensor:
    """Call `i`'s input as the evaluator feeds it: a new rolled copy (the last KEEP kept alive, so no storage
    recurs), then a NaN block allocated and freed (the allocator poisoned)."""
    x = torch.roll(base.reshape(-1), 7919 * (i + 1)).reshape(base.shape)
    keep.append(x)
    poison = torch.full(base.shape, float("nan"), device="cuda")
    del poison
    return x


ALLOCATOR_COUNTS = ("num_device_alloc", "num_device_free", "num_alloc_retries")


def allocator_counts(before: dict[str, Any]) -> dict[str, int]:
    """cudaMalloc and cudaFree calls and allocator retries since `before` (torch.cuda.memory_stats())."""
    after = torch.cuda.memory_stats()
    return {k: after.get(k, 0) - before.get(k, 0) for k in ALLOCATOR_COUNTS}


def pause_label(first: tuple[str, float]) -> str:
    kind, ms = first
    return f"evict {EVICT_BYTES >> 20} MB of host caches" if kind == "evict" else f"{kind} {ms:g} ms"


class Echo:
    """A child process that answers each line ECHO_MS after it came: a worker's blocking round trip to its
    parent before each timed call (tools/worker/candidate.py `JudgeLink.ask`)."""

    CHILD = (
        "import sys, time\nfor line in sys.stdin:\n    time.sleep(float(line))\n    print('go', flush=True)\n"
    )

    def __init__(self, ms: float) -> None:
        self.ms = ms
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def __call__(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"{self.ms / 1e3}\n")
        self.proc.stdin.flush()
        self.proc.stdout.readline()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def fingerprint(out: torch.Tensor, weights: torch.Tensor) -> float:
    """The worker's read of a timed output before the next call: a weighted sum on the device, read back."""
    flat = out.reshape(-1)
    n = min(flat.numel(), weights.numel())
    return float((flat[:n] * weights[:n]).sum().item())


def loop(
    model: torch.nn.Module,
    base: torch.Tensor,
    flush: torch.Tensor,
    fresh: bool,
    calls: int,
    pause_first: tuple[str, float] | None = None,
    reset_l2: Callable[[], int] | None = None,
    echo: Echo | None = None,
    settle: torch.Tensor | None = None,
    hold_ms: float | None = None,
) -> dict[str, Any]:
    """`pause_first`: (kind, ms) for `pause` before each call; `reset_l2`: the persisting-L2 reset, called before
    each flush as the evaluator's loop does (tools/worker/l2.py); `echo`: a round trip to a child before each
    call; `settle`: weights to fingerprint the previous output with, after the round trip; `hold_ms`: the stream
    held that long by a spinning kernel before the start event, as the evaluator's launch hold does (the host
    then issues the forward behind a busy GPU)."""
    keep: collections.deque[torch.Tensor] = collections.deque(maxlen=KEEP)
    host, device, trips = [], [], []
    before = torch.cuda.memory_stats()
    out = None
    for i in range(calls):
        if pause_first is not None:
            pause(*pause_first)
        if echo is not None:
            t = time.perf_counter()
            echo()
            trips.append((time.perf_counter() - t) * 1e3)
        if settle is not None and out is not None:
            fingerprint(out, settle)
        x = fresh_input(base, i, keep) if fresh else base
        if reset_l2 is not None:
            reset_l2()
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hold_ms is not None:
            torch.cuda._sleep(int(hold_ms * 1e-3 * CLOCK_HZ))
        h0 = time.perf_counter()
        start.record()
        with torch.no_grad():
            new = model(x)
        issued = time.perf_counter()
        end.record()
        end.synchronize()
        out = new  # the previous output lives until the next call returns, as in the evaluator
        host.append((issued - h0) * 1e3)
        device.append(start.elapsed_time(end))
    del out
    counts = allocator_counts(before)
    return {
        "inputs": "fresh" if fresh else "same",
        "before": pause_label(pause_first) if pause_first else "nothing",
        "reset_l2": reset_l2 is not None,
        "echo_ms": echo.ms if echo is not None else None,
        "round_trip_median_ms": statistics.median(trips) if trips else None,
        "settle": settle is not None,
        "hold_ms": hold_ms,
        "event_median_ms": statistics.median(device),
        "event_min_ms": min(device),
        "launch_median_ms": statistics.median(host),
        "launch_min_ms": min(host),
        **counts,
    }


def build(path: Path) -> tuple[torch.nn.Module, torch.Tensor]:
    module = load(path)
    torch.manual_seed(0)
    model = module.ModelNew(SHAPE[2], D_STATE).cuda()
    base = torch.randn(*SHAPE, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            model(base)
    torch.cuda.synchronize()
    return model, base


def probe(paths: list[Path], calls: int, guard: Path | None, contain: bool) -> list[dict[str, Any]]:
    """Every kernel is built before any loop runs: the guard, which comes last and cannot be undone, would
    refuse a later build's writes."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    built = [build(path) for path in paths]
    results: list[dict[str, Any]] = []
    for path, (model, base) in zip(paths, built, strict=True):  # no profiler has run in this process yet
        results.append(
            {"kernel": str(path), "loops": [loop(model, base, flush, f, calls) for f in (False, True)]}
        )
    for r, (model, base) in zip(results, built, strict=True):
        r["timeline"] = timeline(model, base, flush)
    reset, _ = find_runtime()  # the evaluator's own lookup, in torch's CUDA runtime
    if reset is None:
        raise RuntimeError("no CUDA runtime with cudaCtxResetPersistingL2Cache in this process")
    for r, (model, base) in zip(results, built, strict=True):  # the core idle, or busy, before each call
        r["loops"] += [
            loop(model, base, flush, True, calls, (kind, PAUSE_MS)) for kind in ("sleep", "spin", "evict")
        ]
        # the persisting-L2 reset before each flush, as the evaluator's loop has it: alone, then after the core slept
        r["loops"] += [
            loop(model, base, flush, True, calls, first, reset_l2=reset)
            for first in (None, ("sleep", PAUSE_MS))
        ]
    warm_profiler()  # as every CUDA worker made ahead does (tools/worker/usage.py warm_up_cuda)
    for r, (model, base) in zip(results, built, strict=True):
        r["loops"] += [
            {**loop(model, base, flush, fresh, calls), "after_profiler": True} for fresh in (False, True)
        ]
    echo, weights = Echo(ECHO_MS), torch.rand(1 << 22, device="cuda")
    for r, (model, base) in zip(results, built, strict=True):  # as a worker: its parent's reply, its reads
        r["loops"] += [
            {
                **loop(model, base, flush, True, calls, reset_l2=reset, echo=echo, settle=w),
                "after_profiler": True,
            }
            for w in (None, weights)
        ]
    for r, (model, base) in zip(results, built, strict=True):  # issued behind a busy GPU, as the hold has it
        r["loops"] += [
            {
                **loop(model, base, flush, True, calls, reset_l2=reset, echo=e, settle=w, hold_ms=HOLD_MS),
                "after_profiler": True,
            }
            for e, w in ((None, None), (echo, weights))
        ]
    echo.close()
    for r, (model, base) in zip(results, built, strict=True):
        r["loops"].append(guarded(evaluator_loop, model, base, calls))
    if guard is not None:
        install_guard(guard)
        for r, (model, base) in zip(results, built, strict=True):
            r["loops"] += [
                {**loop(model, base, flush, fresh, calls), "after_guard": True} for fresh in (False, True)
            ]
    if contain:
        for r in results:
            r["speculation_before"] = speculation()
        install_containment()
        for r, (model, base) in zip(results, built, strict=True):
            r["speculation_after"] = speculation()
            r["loops"] += [
                {**loop(model, base, flush, fresh, calls, hold_ms=h), "contained": True}
                for fresh, h in ((False, None), (True, None), (True, HOLD_MS))
            ]
            r["loops"].append({**guarded(evaluator_loop, model, base, calls), "contained": True})
    return results


def guarded(loop_fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """A loop's figures, or its error as data: one failing loop must not lose the others' figures."""
    try:
        return loop_fn(*args)
    except Exception as e:  # noqa: BLE001 - a measurement script: the error is reported, the rest goes on
        return {"inputs": "fresh", "before": loop_fn.__name__, "error": f"{type(e).__name__}: {e}"}


def evaluator_loop(model: torch.nn.Module, base: torch.Tensor, calls: int) -> dict[str, Any]:
    """The evaluator's own timing loop (tools/worker/timing.py `measure`: the flush, the launch hold, the
    events) in this plain process, fed as the worker feeds it (a fresh rolled input and the NaN block before
    each call): whether the loop or the worker's process makes the worker's issue time."""
    import tools.worker.timing as timing  # tests/test_architecture.py MIMICS_A_WORKER

    keep: collections.deque[torch.Tensor] = collections.deque(maxlen=KEEP)
    current: dict[str, torch.Tensor] = {}

    def prepare(i: int) -> None:  # warm-ups are i = -1, -2, -3: every call gets its own roll
        current["x"] = fresh_input(base, i + 1, keep)

    def call(i: int) -> object:
        with torch.no_grad():
            return model(current["x"])

    before = torch.cuda.memory_stats()
    samples = timing.measure(
        call,
        prepare,
        device="cuda",
        warmup=3,
        min_iters=calls,
        max_iters=calls,
        target_rse=0.0,
        max_seconds=60.0,
    )
    stats = samples.stats()
    return {
        "inputs": "fresh",
        "before": "nothing",
        "evaluator_loop": True,
        "event_median_ms": stats["event_median_ms"],
        "event_min_ms": min(samples.device_ms),
        "launch_median_ms": stats["launch_median_ms"],
        "launch_min_ms": stats["launch_min_ms"],
        "figure_median_ms": stats["median_ms"],
        "hold_median_ms": stats["hold_median_ms"],
        "exposed_launch_median_ms": stats["exposed_launch_median_ms"],
        "hold": stats["hold"],
        **allocator_counts(before),
    }


def speculation() -> str:
    """This process's speculative-store-bypass and indirect-branch states, as the kernel reports them: a
    seccomp filter turns the mitigations on for the process where the kernel's policy says `seccomp`."""
    with open("/proc/self/status") as fh:
        return "; ".join(line.strip() for line in fh if line.startswith("Speculation"))


def install_containment() -> None:
    """The candidate worker's containment (tools/worker/contain.py) as it was until 2026-12-08: no
    capabilities, no new privileges, the keyring calls refused by a seccomp filter installed through prctl,
    which lets the kernel force speculation mitigations on the process where its policy is `seccomp`. The
    worker now installs the filter with SECCOMP_FILTER_FLAG_SPEC_ALLOW; these loops say what the old way cost
    (the speculation state before and after is in the output). Cannot be undone, so it comes last."""
    import tools.worker.contain as contain  # tests/test_architecture.py MIMICS_A_WORKER

    contain.drop_capabilities()
    contain.block_keyrings(allow_speculation=False)  # prctl's path, as the worker had it


def install_guard(writable: Path) -> None:
    """The evaluator's audit hook (tools/worker/guard.py), as its candidate process has it: whether a Python
    audit hook, called on every audited event, slows the host's path through one forward. Cannot be undone,
    so it comes last."""
    import tempfile

    import tools.worker.guard as guard  # tests/test_architecture.py MIMICS_A_WORKER

    work = Path(tempfile.mkdtemp(prefix="probe-guard-"))
    guard.install(
        guard.Guard(work, secret=[work / "secret"], build_cache=work / "cache"), lambda kind, detail: None
    )


def warm_profiler() -> None:
    """One CUDA profiler session on a tiny op, like the evaluator's worker warm-up: whether CUPTI, once
    started in a process, makes every later launch slower."""
    from torch.profiler import ProfilerActivity, profile

    x = torch.ones(64, 64, device="cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        x.add_(1)
        torch.cuda.synchronize()
    prof.events()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kernels", nargs="+", type=Path)
    parser.add_argument("--calls", type=int, default=120)
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--contain",
        action="store_true",
        help="then loops again under the worker's containment (seccomp, no capabilities)",
    )
    parser.add_argument(
        "--guard", action="store_true", help="then both loops again under the evaluator's audit hook"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("launch_probe needs a CUDA GPU", file=sys.stderr)
        return 1
    writable = args.json.resolve().parent if args.json else Path.cwd()  # the guard lets only this be written
    results = probe(args.kernels, args.calls, writable if args.guard else None, args.contain)
    for r in results:
        print(r["kernel"])
        if "speculation_before" in r:
            print(f"  before containment: {r['speculation_before']}\n  after: {r['speculation_after']}")
        for row in r["timeline"]:
            print(f"  {row['on']} {row['start_us']:8.1f} .. {row['end_us']:8.1f} us  {row['name']}")
        for lp in r["loops"]:
            if "error" in lp:
                print(f"  {lp['before']}: {lp['error']}")
                continue
            after = " after the profiler" if lp.get("after_profiler") else ""
            after = " under the audit hook" if lp.get("after_guard") else after
            after = " contained" if lp.get("contained") else after
            after += f" behind a {lp['hold_ms']:g} ms hold" if lp.get("hold_ms") else ""
            if lp.get("evaluator_loop"):
                after = (
                    f" in the evaluator's loop (figure {lp['figure_median_ms']:.4f} ms, hold "
                    f"{lp['hold_median_ms']:.4f} ms, exposed {lp['exposed_launch_median_ms']:.4f} ms, {lp['hold']})"
                )
            after += f" after {lp['before']}" if lp.get("before", "nothing") != "nothing" else ""
            after += " with the L2 reset" if lp.get("reset_l2") else ""
            after += f" after a {lp['echo_ms']:g} ms round trip" if lp.get("echo_ms") else ""
            after += " and the last output's fingerprint" if lp.get("settle") else ""
            print(
                f"  {lp['inputs']:5s}{after} event median {lp['event_median_ms']:.4f} ms (min {lp['event_min_ms']:.4f}), "
                f"launch median {lp['launch_median_ms']:.4f} ms (min {lp['launch_min_ms']:.4f}), cudaMalloc {lp['num_device_alloc']}, "
                f"cudaFree {lp['num_device_free']}, retries {lp['num_alloc_retries']}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
