"""A C++ kernel that never returns on problems/selective_scan_cpu.yaml: seconds to a verdict, and the next
candidate evaluates normally. A benchmark, not a test.

    python -m bench.hang_timeout [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tools import benchmark, compile_kernel
from tools.problem import load_problem

SPIN = "  volatile int spin = 1;\n  while (spin) {}\n  auto y = torch::empty_like(x);"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    problem = load_problem("problems/selective_scan_cpu.yaml")
    base = Path("problems/selective_scan_cpu/solutions/baseline.py").read_text()
    hung = base.replace('name="scan_cpu_baseline"', 'name="scan_cpu_hang"')
    hung = hung.replace("  auto y = torch::empty_like(x);", SPIN)
    start = time.monotonic()
    built = compile_kernel(problem, hung)
    build_s = time.monotonic() - start
    assert benchmark(problem, base).status == "ok"  # the baseline built, the reference timed and cached
    start = time.monotonic()
    result = benchmark(problem, hung)
    waited = time.monotonic() - start
    start = time.monotonic()
    after = benchmark(problem, base)
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "status": result.status,
        "seconds_to_verdict": round(waited, 1),
        "build": built.status,
        "build_seconds": round(build_s, 1),
        "message": result.message[:400],
        "next_candidate": after.status,
        "next_seconds": round(time.monotonic() - start, 1),
    }
    print(json.dumps(record, indent=1))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
