"""Where a selective-scan kernel's forward waits on the host, on a GPU: not a test, a measurement.

    python -m bench.launch_probe KERNEL.py [KERNEL.py ...] [--calls 120] [--json OUT]

For each kernel file (a module defining ModelNew, built by its own load_inline), at the primary shape
(16, 1024, 1024, 16):
  timeline    one forward under torch.profiler after an L2 flush: each GPU kernel's start and end and the
              host's launch calls, from the first kernel's start, so an idle GPU between kernels shows
  loops       the timed loop with the same input every call ("same"), then as the evaluator feeds it
              ("fresh": a new rolled copy of the input each call, the last 31 kept alive, a NaN block
              allocated and freed before the call); both again after one CUDA profiler session, as the
              evaluator's worker runs one while it warms up. Each loop reports the CUDA-event median, the
              host's time to issue one forward, and how many cudaMalloc/cudaFree calls and allocator retries
              it made
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
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

SHAPE = (16, 1024, 1024)
D_STATE = 16
KEEP = 31  # inputs kept alive, as the evaluator keeps 2 GB of them at this shape (tools/worker/candidate.py)


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"probe_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timeline(model: torch.nn.Module, x: torch.Tensor, flush: torch.Tensor) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    flush.zero_()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(x)
        torch.cuda.synchronize()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
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
    launches = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and "aunch" in e.name]
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


def loop(
    model: torch.nn.Module, base: torch.Tensor, flush: torch.Tensor, fresh: bool, calls: int
) -> dict[str, Any]:
    keep: collections.deque[torch.Tensor] = collections.deque(maxlen=KEEP)
    host, device = [], []
    before = torch.cuda.memory_stats()
    out = None
    for i in range(calls):
        x = base
        if fresh:
            x = torch.roll(base.reshape(-1), 7919 * (i + 1)).reshape(base.shape)
            keep.append(x)
            poison = torch.full(base.shape, float("nan"), device="cuda")
            del poison
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
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
    after = torch.cuda.memory_stats()
    counts = {
        k: after.get(k, 0) - before.get(k, 0)
        for k in ("num_device_alloc", "num_device_free", "num_alloc_retries")
    }
    return {
        "inputs": "fresh" if fresh else "same",
        "event_median_ms": statistics.median(device),
        "event_min_ms": min(device),
        "launch_median_ms": statistics.median(host),
        **counts,
    }


def probe(path: Path, calls: int) -> dict[str, Any]:
    module = load(path)
    torch.manual_seed(0)
    model = module.ModelNew(SHAPE[2], D_STATE).cuda()
    base = torch.randn(*SHAPE, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            model(base)
    torch.cuda.synchronize()
    loops = [loop(model, base, flush, fresh, calls) for fresh in (False, True)]
    warm_profiler()  # as every CUDA worker made ahead does (tools/worker/usage.py warm_up_cuda)
    loops += [{**loop(model, base, flush, fresh, calls), "after_profiler": True} for fresh in (False, True)]
    return {"kernel": str(path), "timeline": timeline(model, base, flush), "loops": loops}


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
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("launch_probe needs a CUDA GPU", file=sys.stderr)
        return 1
    results = [probe(path, args.calls) for path in args.kernels]
    for r in results:
        print(r["kernel"])
        for row in r["timeline"]:
            print(f"  {row['on']} {row['start_us']:8.1f} .. {row['end_us']:8.1f} us  {row['name']}")
        for lp in r["loops"]:
            after = " after the profiler" if lp.get("after_profiler") else ""
            print(
                f"  {lp['inputs']:5s}{after} event median {lp['event_median_ms']:.4f} ms (min {lp['event_min_ms']:.4f}), "
                f"launch median {lp['launch_median_ms']:.4f} ms, cudaMalloc {lp['num_device_alloc']}, "
                f"cudaFree {lp['num_device_free']}, retries {lp['num_alloc_retries']}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
