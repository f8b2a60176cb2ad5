"""The host time from a forward's start to its first kernel launch, cold and warm, on a GPU: not a test, a
measurement (issue 51: the timed region starts with the host's launch path warm).

    python -m bench.first_launch KERNEL.py [KERNEL.py ...] [--repeat 5] [--json OUT]

For each kernel file (a module defining ModelNew, built by its own load_inline) at the selective scan's
primary shape (16, 1024, 1024, 16): `cold`, the first forward ever of a fresh model on a fresh input (what
a timed call pays without a warm-up: lazy set-up, first-call work), then `warm`, the median over `--repeat`
forwards after three warm-ups (what every timed call of the evaluator pays now: each loop starts after one
warm-up at least, tools/judge/_plan.py `timing_cfgs`), each measured as the evaluator's profiled forward
measures it (tools/worker/usage.py `first_launch`: `usage.first_launch_ms` in a benchmark's result).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.launch_probe import D_STATE, SHAPE, load, warm_profiler  # noqa: E402
from tools.launches import REGION, first_launch  # noqa: E402


def first_launch_ms(model: torch.nn.Module, x: torch.Tensor) -> float | None:
    """Host ms from the forward's start to the first launch call after it, by the profiler's host clock."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        with record_function(REGION):
            model(x)
        torch.cuda.synchronize()
    host = [
        (e.name, e.time_range.start) for e in prof.events() if e.device_type != torch.autograd.DeviceType.CUDA
    ]
    ms: float | None = first_launch(host)["first_launch_ms"]
    return ms


def measure(path: Path, repeat: int) -> dict[str, Any]:
    module = load(path)
    torch.manual_seed(0)
    model = module.ModelNew(SHAPE[2], D_STATE).cuda()
    x = torch.randn(*SHAPE, device="cuda")
    cold = first_launch_ms(model, x)
    with torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.synchronize()
    warm = [v for _ in range(repeat) if (v := first_launch_ms(model, x)) is not None]
    return {
        "kernel": path.name,
        "cold_ms": cold,
        "warm_median_ms": statistics.median(warm) if warm else None,
        "warm_ms": warm,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernels", nargs="+", type=Path)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    warm_profiler()  # as the evaluator's worker starts: the context, cuBLAS and the profiler made first
    rows = [measure(path, args.repeat) for path in args.kernels]
    for row in rows:
        print(
            f"{row['kernel']}: first launch cold {row['cold_ms']} ms, warm {row['warm_median_ms']} ms (median)"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
