"""Does a CUDA worker starting in another process move a timed loop's device clock? An evaluation now makes
the next evaluation's worker (tools/worker/usage.warm_up_cuda: context, cuBLAS, two tiny kernels, the CUDA
profiler's start, the pinned buffer for its kept outputs) while its own candidate is timed. This times calls of two workloads with CUDA events, in
windows with nothing else on the device and in windows while such a worker starts, and compares them.

    python bench/worker_beside_timing.py [--rounds 3] [--json OUT.json]

Workloads: `gemm` (fp32 2048², ~0.3 ms on the H200, TF32 off) and `small` (an elementwise add of 1M floats,
microseconds: launch-level jitter shows there first). Each round has a window beside a starting worker (a
fresh interpreter, as the zygote's fork costs less than that, so the window is if anything longer) and a
quiet window of the same length; per-call times go into both sets. Prints the median, p90, p99 and max of
each, and their ratios; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.envinfo import harness_sha  # noqa: E402

# As the selective scan's workers start: 302 MB pinned for the largest shape's three kept outputs.
STARTER = "from tools.worker.usage import warm_up_cuda; warm_up_cuda(302 << 20)"


def workloads() -> dict[str, Callable[[], Any]]:
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    return {"gemm": lambda: a @ b, "small": lambda: x + y}


def timed_call(fn: Callable[[], Any]) -> float:
    """One call's device time in ms, as a timing loop reads it: events around it, then a sync."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def window(fns: dict[str, Callable[[], Any]], until: Callable[[], bool]) -> dict[str, list[float]]:
    """Calls of every workload, in turn, until `until()`."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    while not until():
        for name, fn in fns.items():
            times[name].append(timed_call(fn))
    return times


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered), 5),
        "p90_ms": round(pct(0.90), 5),
        "p99_ms": round(pct(0.99), 5),
        "max_ms": round(ordered[-1], 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()

    fns = workloads()
    window(fns, _for(1.0))  # warm: clocks up, cuBLAS's plan made
    quiet: dict[str, list[float]] = {name: [] for name in fns}
    beside: dict[str, list[float]] = {name: [] for name in fns}
    starts: list[float] = []
    for _ in range(args.rounds):
        began = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-c", STARTER], cwd=REPO)
        got = window(fns, proc_ended(proc))
        starts.append(time.monotonic() - began)
        if proc.returncode != 0:
            raise SystemExit(f"the worker's start failed (exit {proc.returncode})")
        for name, values in got.items():
            beside[name] += values
        for name, values in window(fns, _for(starts[-1])).items():
            quiet[name] += values

    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "harness_sha": harness_sha(),
        "worker_start_s": [round(s, 2) for s in starts],
        "workloads": {},
    }
    for name in fns:
        q, b = stats(quiet[name]), stats(beside[name])
        ratios = {k: round(b[k] / q[k], 3) for k in ("median_ms", "p90_ms", "p99_ms")}
        report["workloads"][name] = {"quiet": q, "beside_a_starting_worker": b, "ratio": ratios}
        print(f"{name:6s} quiet  {q}\n{'':6s} beside {b}\n{'':6s} ratio  {ratios}")
    print(f"worker starts (s): {report['worker_start_s']}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n")


def proc_ended(proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: proc.poll() is not None


def _for(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


if __name__ == "__main__":
    main()
