"""Where an evaluation's seconds go, seen from the parent: each child's lifetime and the arrival time of each
message it sent (imported, case_done, batch_begin/end, timing_done), as `tools.supervise.listen` hears
them (warm truth servers and forked candidates included). A benchmark, not a test.

    python bench/eval_phases.py PROBLEM KERNEL.py [--repeat N] [--think S] [--json OUT]

Warm workers are used unless KERNEL_AGENT_WARM=0; `--think` waits between evaluations (as a model thinks),
so that truth prepared ahead of time is ready for the next one.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools import benchmark
from tools.envinfo import hardware_summary
from tools.problem import Problem, load_problem
from tools.supervise import listen


def instrument(log: list[dict[str, Any]], t0: list[float]) -> Callable[[str, str, str | None], None]:
    """A listener that stamps every worker's start, message and exit with the parent's clock."""

    def stamp(who: str, event: str, name: str | None) -> None:
        log.append({"t": round(time.monotonic() - t0[0], 3), "who": who, "event": event, "name": name})

    return stamp


def one_evaluation(
    problem: Problem, code: str, think: float, log: list[dict[str, Any]], t0: list[float]
) -> dict[str, Any]:
    """One benchmark after `think` seconds, printed with its timeline."""
    time.sleep(think)
    log.clear()
    t0[0] = time.monotonic()
    result = benchmark(problem, code)
    print(f"{result.status} {result.workers} {result.seconds:.2f} s {result.flags} {result.message[:200]}")
    print("  phases: " + ", ".join(f"{k} {v:.2f}" for k, v in result.phases.items() if v >= 0.01))
    for row in log:
        print(f"  {row['t']:8.3f}  {row['who']:9s} {row['event']} {row['name'] or ''}")
    return {
        "status": result.status,
        "seconds": result.seconds,
        "workers": result.workers,
        "phases": result.phases,
        "flags": result.flags,
        "timings": [
            t.model_dump(include={"name", "candidate", "reference", "speedup"}) for t in result.timings
        ],
        "message": result.message[:500],
        "timeline": list(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("problem")
    parser.add_argument("kernel")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--think", type=float, default=0.0, help="seconds to wait between evaluations")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args()
    problem = load_problem(args.problem)
    code = Path(args.kernel).read_text()
    log: list[dict[str, Any]] = []
    t0 = [time.monotonic()]
    with listen(instrument(log, t0)):
        runs = [one_evaluation(problem, code, args.think if i else 0.0, log, t0) for i in range(args.repeat)]
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "hardware": hardware_summary(problem),
        "problem": problem.name,
        "kernel": args.kernel,
        "runs": runs,
    }
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
