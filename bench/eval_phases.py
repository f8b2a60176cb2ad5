"""Where an evaluation's seconds go, seen from the parent: each child's lifetime and the arrival time of each
message it sent (imported, case_done, batch_begin/end, timing_done). A benchmark, not a test.

    python bench/eval_phases.py PROBLEM KERNEL.py [--repeat N] [--think S] [--json OUT]

Warm workers are used unless KERNEL_AGENT_WARM=0; `--think` waits between evaluations (as a model thinks),
so that truth prepared ahead of time is ready for the next one.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tools import benchmark
from tools.envinfo import hardware_summary
from tools.judge import _evaluate, _plan
from tools.problem import load_problem
from tools.supervise import jobs


def instrument(log: list[dict[str, Any]], t0: list[float]) -> None:
    """Wrap the two child launches so every message gets a parent-side timestamp."""
    real_truth, real_candidate = _plan.run_truth, jobs.run_candidate

    def stamp(who: str, event: str, **extra: Any) -> None:
        log.append({"t": round(time.monotonic() - t0[0], 3), "who": who, "event": event, **extra})

    def run_truth(job: Any, problem: Any, plan: Any) -> Any:
        stamp("truth", "spawn")
        outcome = real_truth(job, problem, plan)
        stamp("truth", "exit", seconds=round(outcome.seconds, 3))
        return outcome

    def run_candidate(
        job: Any, problem: Any, request: Any, on_message: Any = None, secrets: Any = (), **kw: Any
    ) -> Any:
        def handle(msg: dict[str, Any]) -> str | None:
            stamp("candidate", msg.event, name=getattr(msg, "name", None))
            return on_message(msg) if on_message else None

        stamp("candidate", "spawn")
        outcome = real_candidate(job, problem, request, on_message=handle, secrets=secrets, **kw)
        stamp("candidate", "exit", seconds=round(outcome.seconds, 3))
        return outcome

    _plan.run_truth = run_truth
    _evaluate.run_candidate = run_candidate


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
    runs = []
    log: list[dict[str, Any]] = []
    t0 = [time.monotonic()]
    instrument(log, t0)
    for i in range(args.repeat):
        if i and args.think:
            time.sleep(args.think)
        log.clear()
        t0[0] = time.monotonic()
        result = benchmark(problem, code)
        runs.append(
            {
                "status": result.status,
                "seconds": result.seconds,
                "workers": result.workers,
                "phases": result.phases,
                "flags": result.flags,
                "timings": [
                    t.model_dump(include={"name", "candidate", "reference", "speedup"})
                    for t in result.timings
                ],
                "message": result.message[:500],
                "timeline": list(log),
            }
        )
        print(
            f"{result.status} {result.workers} {result.seconds:.2f} s {result.flags} {result.message[:200]}"
        )
        print("  phases: " + ", ".join(f"{k} {v:.2f}" for k, v in result.phases.items() if v >= 0.01))
        for row in log:
            print(f"  {row['t']:8.3f}  {row['who']:9s} {row['event']} {row.get('name') or ''}")
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
