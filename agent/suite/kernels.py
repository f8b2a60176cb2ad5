"""`agent suite --kernels DIR`: kernels written elsewhere judged with no model.

The kernel of problem NAME (its spec's `name`) is `DIR/NAME.py`, else every `DIR/NAME/*.py` (each judged;
the fastest correct one counts). Each is benchmarked as `agent bench` would (`tools.benchmark`, through
the suite's leases); every verdict is kept whole in `kernels/NAME/<file>.json` in the suite folder. A
problem with no kernel file ends `no_kernel` (not correct, exit code 2).
"""

from __future__ import annotations

import time
from pathlib import Path

from agent.execution.executor import KernelJob, LocalEvaluator
from agent.suite.records import KernelVerdict, ProblemResult
from agent.suite.runner import SuiteContext, SuiteExecutor
from tools.problem import Problem
from tools.results import BenchResult

KERNELS = "kernels"


def kernel_files(kernels_dir: Path, name: str) -> list[Path]:
    single = kernels_dir / f"{name}.py"
    if single.is_file():
        return [single]
    folder = kernels_dir / name
    return sorted(folder.glob("*.py")) if folder.is_dir() else []


def bench_exit_code(result: BenchResult) -> int:
    """`agent bench`'s code: 0 correct, 1 evaluated but not correct, 3 harness error."""
    if result.correct:
        return 0
    return 3 if result.status == "harness_error" else 1


class OneOffEvaluator(LocalEvaluator):
    """As `agent bench` evaluates: no truth made ahead for a next evaluation that will not come (on a CPU
    suite it would take cores from another problem's timing)."""

    def evaluate(self, problem: Problem, code: str, gpu: int | None, seed: int | None = None) -> BenchResult:
        from tools import benchmark

        return benchmark(problem, code, seed, gpu=gpu, prefetch_next=False)


def judge(problem: Problem, path: Path, context: SuiteContext) -> BenchResult:
    executor = SuiteExecutor(context, OneOffEvaluator())
    result = executor.benchmark(KernelJob(problem, path.read_text(), kernel_path=str(path)))
    out = context.suite_dir / KERNELS / problem.name / f"{path.stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.model_dump_json(indent=2) + "\n")
    return result


def verdict(path: Path, result: BenchResult) -> KernelVerdict:
    correct = result.correct
    figures = result.figures
    return KernelVerdict(
        path=str(path), status=result.status, correct=correct, speedup=result.speedup if correct else None,
        eager_speedup=result.eager_speedup if correct else None,
        floor_fraction=figures.floor_fraction if correct and figures is not None else None, message=result.message,
    )  # fmt: skip


def best_of(verdicts: list[KernelVerdict]) -> KernelVerdict | None:
    correct = [v for v in verdicts if v.correct and v.speedup is not None]
    return max(correct, key=lambda v: v.speedup or 0.0) if correct else None


def problem_code(results: list[BenchResult]) -> int:
    codes = [bench_exit_code(r) for r in results]
    return 0 if 0 in codes else 3 if 3 in codes else 1


def judge_kernels(problem: Problem, context: SuiteContext, kernels_dir: Path) -> ProblemResult:
    """Every kernel file of the problem judged; the problem's result is its fastest correct one."""
    started = time.monotonic()
    base = {"problem": problem.name, "problem_path": str(problem.path), "device": problem.spec.device}
    files = kernel_files(kernels_dir, problem.name)
    if not files:
        where = f"{kernels_dir / problem.name}.py or {kernels_dir / problem.name}/*.py"
        return ProblemResult(
            **base, outcome="ended", exit_code=2, exit_status="no_kernel", message=f"no kernel: {where}"
        )
    results = [judge(problem, path, context) for path in files]
    verdicts = [verdict(path, r) for path, r in zip(files, results, strict=True)]
    best = best_of(verdicts)
    chosen = best or verdicts[0]
    code = problem_code(results)
    return ProblemResult(
        **base,
        outcome="harness_error" if code == 3 else "ended",
        exit_code=code,
        exit_status=chosen.status,
        message=chosen.message,
        best_speedup=best.speedup if best else None,
        best_eager_speedup=best.eager_speedup if best else None,
        best_floor_fraction=best.floor_fraction if best else None,
        best_kernel=best.path if best else None,
        kernels=verdicts,
        wall_seconds=time.monotonic() - started,
    )
