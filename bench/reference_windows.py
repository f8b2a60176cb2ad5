"""Why the eager reference's time moves between windows on one quiet host: a benchmark, not a test.

    python bench/reference_windows.py problems/selective_scan.yaml --windows 8 --json OUT.json

On the H200 (2026-12-04, cfed4f2) the paired check's five calls of the selective scan's reference at its
primary shape gave 51-105 ms a call on a quiet host, from one truth server process, while each window's own
calls spread 3-5 %: the same kernel's speedup read 28x, then 43x. The reference is a launch-bound Python
loop, so its time follows the host's thread: the core it runs on, that core's clock, its distance from the
GPU (NUMA), and what wakes it after seconds idle. This times the reference as the check does (a warm-up
call, then `--calls` calls, each between CUDA events, after `--gap` seconds idle) in interleaved modes:

- `plain`: as the check does;
- `warm`: after `--warm-s` seconds of untimed calls (a clock or a core that ramps up after idling);
- `local` / `far`: the process pinned to the CPUs near the GPU (sysfs `local_cpulist`) / the others;
- `nogc`: Python's garbage collector off during the window;
- `nogap`: no idle time before the window.

Then `--sustain-s` seconds of calls back to back, each timed: does the reference speed up or slow down as
it keeps running (the full timing runs it up to 20 s, a check six calls after seconds idle)?

Each window records its median, the CPU the thread ran on before and after, that CPU's clock (MHz) and the
GPU's SM clock. The summary gives each mode's window medians (median, min, max, max/min): the mode whose
windows agree is the fix for the paired check.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tools.problem import load_problem  # noqa: E402

MODES = ("plain", "warm", "local", "far", "nogc", "nogap")


def reference_at_primary(problem_path: str, device: str) -> tuple[torch.nn.Module, list[Any]]:
    """The problem's reference model and inputs at its primary timing shape, fp32, on `device`."""
    problem = load_problem(problem_path)
    spec = importlib.util.spec_from_file_location("reference_under_probe", problem.reference_path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {problem.reference_path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, value in problem.sizes_of(problem.primary).items():
        setattr(module, name, value)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
    return model, inputs


def current_cpu() -> int:
    """The CPU this thread last ran on (/proc/self/stat, field 39)."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])


def cpu_mhz(cpu: int) -> float | None:
    freq = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
    if freq.is_file():
        return int(freq.read_text()) / 1000
    for entry in Path("/proc/cpuinfo").read_text().split("\n\n"):
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in entry.splitlines())}
        if fields.get("processor") == str(cpu) and "cpu MHz" in fields:
            return float(fields["cpu MHz"])
    return None


def gpu_sm_mhz() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        return float(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def parse_cpulist(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus |= set(range(int(low), int(high) + 1))
        elif part:
            cpus.add(int(part))
    return cpus


def gpu_local_cpus() -> set[int] | None:
    """The CPUs sysfs calls local to GPU 0's PCI device, or None where it does not say."""
    props = torch.cuda.get_device_properties(0)
    domain, bus, dev = (getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device"))
    if bus is None or dev is None:
        return None
    path = Path(f"/sys/bus/pci/devices/{domain or 0:04x}:{bus:02x}:{dev:02x}.0/local_cpulist")
    return parse_cpulist(path.read_text()) if path.is_file() else None


@contextlib.contextmanager
def pinned(cpus: set[int] | None) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def collector_off(off: bool) -> Iterator[None]:
    was = gc.isenabled()
    if off:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def timed_calls(call: Callable[[], Any], n: int) -> list[float]:
    """`n` calls' milliseconds, each between CUDA events, synchronized after each (as the harness times);
    by the host's clock without a GPU (a dry run of this script)."""
    times = []
    for _ in range(n):
        if not torch.cuda.is_available():
            start_s = time.perf_counter()
            call()
            times.append((time.perf_counter() - start_s) * 1000)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def window(
    mode: str, call: Callable[[], Any], args: argparse.Namespace, cpus: dict[str, set[int] | None]
) -> dict:
    if mode != "nogap":
        time.sleep(args.gap)
    where = cpus.get(mode) if mode in ("local", "far") else None
    with pinned(where), collector_off(mode == "nogc"):
        before = current_cpu()
        mhz = cpu_mhz(before)
        if mode == "warm":
            until = time.perf_counter() + args.warm_s
            while time.perf_counter() < until:
                call()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
        timed_calls(call, 1)  # the check's warm-up call
        ms = timed_calls(call, args.calls)
        after = current_cpu()
    return {
        "mode": mode, "median_ms": statistics.median(ms), "calls_ms": ms, "cpu_before": before,
        "cpu_after": after, "cpu_mhz": mhz, "gpu_sm_mhz": gpu_sm_mhz(), "pinned": sorted(where or []),
    }  # fmt: skip


def sustained(call: Callable[[], Any], seconds: float, gap: float) -> dict[str, Any]:
    """Calls back to back for `seconds` after `gap` idle, each timed: whether the reference speeds up or slows
    down as it keeps running (a core's clock that drops once its turbo budget is spent; a GPU clock that ramps
    up): the full timing runs it for up to 20 s, a check for six calls after seconds idle."""
    time.sleep(gap)
    cpu = current_cpu()
    mhz_start = cpu_mhz(cpu)
    began, calls = time.perf_counter(), []
    while time.perf_counter() - began < seconds:
        (ms,) = timed_calls(call, 1)
        calls.append((round(time.perf_counter() - began, 3), ms))
    tenths = max(1, len(calls) // 10)
    return {
        "calls": calls, "cpu_mhz_start": mhz_start, "cpu_mhz_end": cpu_mhz(current_cpu()),
        "first_tenth_ms": statistics.median(ms for _, ms in calls[:tenths]),
        "last_tenth_ms": statistics.median(ms for _, ms in calls[-tenths:]),
    }  # fmt: skip


def summarize(rows: list[dict]) -> dict[str, dict[str, float]]:
    out = {}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        meds = [r["median_ms"] for r in rows if r["mode"] == mode]
        out[mode] = {
            "windows": len(meds), "median_ms": statistics.median(meds), "min_ms": min(meds),
            "max_ms": max(meds), "max_over_min": max(meds) / min(meds),
        }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problem")
    p.add_argument("--windows", type=int, default=8, help="windows of each mode, interleaved")
    p.add_argument("--calls", type=int, default=5, help="timed calls a window (the paired check's)")
    p.add_argument("--gap", type=float, default=1.5, help="seconds idle before a window")
    p.add_argument("--warm-s", type=float, default=0.3, help="untimed calls before a `warm` window")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--sustain-s", type=float, default=5.0, help="then calls back to back this long (0: none)")
    p.add_argument("--json", dest="json_out")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()  # without one: a dry run on the CPU, with no placement modes
    model, inputs = reference_at_primary(args.problem, "cuda" if cuda else "cpu")

    def call() -> Any:
        with torch.no_grad():
            return model(*inputs)

    local = gpu_local_cpus() if cuda else None
    every = os.sched_getaffinity(0)
    cpus = {"local": local & every if local else None, "far": every - local if local else None}
    modes = [m for m in args.modes.split(",") if m in MODES and (m not in cpus or cpus[m])]
    timed_calls(call, 2)
    rows = []
    for i in range(args.windows):
        for mode in modes:
            row = window(mode, call, args, cpus)
            rows.append(row)
            print(
                f"{i} {mode:6s} {row['median_ms']:8.2f} ms  cpu {row['cpu_before']}->{row['cpu_after']} "
                f"{row['cpu_mhz'] or 0:.0f} MHz  sm {row['gpu_sm_mhz'] or 0:.0f} MHz",
                flush=True,
            )
    summary = summarize(rows)
    for mode, s in summary.items():
        print(
            f"{mode:6s} windows {s['windows']}: median {s['median_ms']:.2f} ms, {s['min_ms']:.2f}-{s['max_ms']:.2f} "
            f"(max/min {s['max_over_min']:.2f})"
        )
    run = sustained(call, args.sustain_s, args.gap) if args.sustain_s > 0 else None
    if run is not None:
        print(
            f"sustained {args.sustain_s:.0f} s, {len(run['calls'])} calls: first tenth {run['first_tenth_ms']:.2f} ms, "
            f"last tenth {run['last_tenth_ms']:.2f} ms; cpu {run['cpu_mhz_start'] or 0:.0f} -> "
            f"{run['cpu_mhz_end'] or 0:.0f} MHz"
        )
    if args.json_out:
        record = {
            "date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(0) if cuda else None,
            "torch": torch.__version__,
            "host_cpus": sorted(every), "gpu_local_cpus": sorted(local) if local else None,
            "args": vars(args), "summary": summary, "windows": rows, "sustained": run,
        }  # fmt: skip
        Path(args.json_out).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
