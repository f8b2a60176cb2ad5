"""A CPU problem's reference timed call by call in fresh processes, with glibc's default heap and with the
kept heap the harness gives every process of a CPU evaluation (tools.supervise.KEPT_HEAP_ENV): wall, user
and system milliseconds and page faults per call, so the share of a call spent on fresh pages is seen.

    python bench/cpu_heap.py problems/selective_scan_cpu.yaml --processes 3 --calls 6 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.host import timing_threads  # noqa: E402
from tools.problem import load_problem  # noqa: E402
from tools.supervise import KEPT_HEAP_ENV, cpu_env  # noqa: E402

# Run in the child: the reference at the primary shape, built as the harness sizes it, timed call by call.
CHILD = """
import json, resource, sys, time, torch
from tools.problem import load_problem
from tools.worker.refmod import load_reference
problem = load_problem(sys.argv[1])
shape = problem.primary
ref = load_reference(problem.reference_source, dict(shape.sizes))
torch.manual_seed(0)
model, inputs = ref.Model(*ref.get_init_inputs()), ref.get_inputs()
calls = []
with torch.no_grad():
    for _ in range(int(sys.argv[2])):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        model(*inputs)
        wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
        calls.append({"wall_ms": wall * 1e3, "user_ms": (r1.ru_utime - r0.ru_utime) * 1e3,
                      "sys_ms": (r1.ru_stime - r0.ru_stime) * 1e3, "faults": r1.ru_minflt - r0.ru_minflt})
print(json.dumps(calls))
"""


def run_process(problem_path: str, calls: int, env: dict[str, str]) -> list[dict[str, float]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, problem_path, str(calls)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(processes: list[list[dict[str, float]]]) -> dict[str, object]:
    """Per process, the median of its calls after the first (the first builds the heap either way)."""
    later = [p[1:] for p in processes]
    return {
        key: [round(statistics.median(c[key] for c in calls), 1) for calls in later]
        for key in ("wall_ms", "user_ms", "sys_ms", "faults")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    threads = timing_threads(load_problem(args.problem))
    budget = {k: v for k, v in cpu_env(threads).items() if k not in KEPT_HEAP_ENV}
    record: dict[str, object] = {"problem": args.problem, "threads": threads, "cpus": os.cpu_count()}
    for name, env in (("default heap", budget), ("kept heap", {**budget, **KEPT_HEAP_ENV})):
        processes = [run_process(args.problem, args.calls, env) for _ in range(args.processes)]
        record[name] = {"calls": processes, "median_after_first": summary(processes)}
        print(f"{name}: {summary(processes)}")
    if args.json:
        args.json.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
