"""`agent bench --baselines` on the CPU: the eager reference (the benchmark's own timing), torch.compile of
the reference cut at its time limit, and a library composition timed in a trusted process of its own,
each with the kernel's speedup against it; and the view that shows them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from agent.views.result import bench_view
from tools.judge import baselines
from tools.problem import Problem, load_problem
from tools.results import BenchResult, ShapeTiming, TimingStats

TESTS = Path(__file__).resolve().parent
COMPOSITION = TESTS / "problems" / "scan_tiny_baselines" / "torch_scan.py"


def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, rse=0.01, n=5, min_ms=ms, max_ms=ms, mean_ms=ms, clock="host")


def with_composition(problem: Problem) -> Problem:
    spec = problem.spec.model_copy(update={"baselines": [str(COMPOSITION)]})
    return problem.model_copy(update={"spec": spec})


def kernel_result(problem: Problem, kernel_ms: float, reference_ms: float) -> BenchResult:
    shape = problem.primary
    timing = ShapeTiming(
        name=shape.name, primary=True, sizes=shape.sizes, candidate=stats(kernel_ms), reference=stats(reference_ms),
        speedup=reference_ms / kernel_ms,
    )  # fmt: skip
    return BenchResult(status="ok", correct=True, speedup=timing.speedup, message="ok", timings=[timing])


def test_each_baseline_is_timed_on_the_trusted_side_with_the_kernels_speedup_against_it() -> None:
    problem = with_composition(load_problem(TESTS / "problems" / "scan_tiny.yaml"))
    result = baselines(problem, kernel_result(problem, 0.5, 20.0), compile_limit_s=1.0)
    report = result.baselines
    assert report is not None
    by_name = {b.name: b for b in report.baselines}
    assert list(by_name) == ["eager", "torch_compile", "torch_scan"]  # no CUDA graph on a CPU problem
    assert by_name["eager"].speedup == pytest.approx(40.0)
    assert by_name["torch_compile"].status == "timeout"
    assert by_name["torch_compile"].message == "did not compile within 1 s"
    library = by_name["torch_scan"]
    assert library.status == "ok", library.message
    assert library.stats is not None
    assert library.speedup == pytest.approx(library.stats.median_ms / 0.5)
    assert library.rel_l2_vs_reference is not None
    assert library.rel_l2_vs_reference < 1e-5  # the same math as the reference, on the same inputs

    console = Console(file=io.StringIO(), width=140, legacy_windows=False)
    for part in bench_view(result, "k.py", full=True):
        console.print(part)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "baselines at small (trusted side" in out
    assert "timeout: did not compile within 1 s" in out
    assert "40.0×" in out


def test_an_incorrect_kernel_gets_no_speedup_against_any_baseline() -> None:
    problem = load_problem(TESTS / "problems" / "scan_tiny.yaml")
    wrong = kernel_result(problem, 0.5, 20.0).model_copy(update={"correct": False, "status": "incorrect"})
    report = baselines(problem, wrong, compile_limit_s=1.0).baselines
    assert report is not None
    assert [b.speedup for b in report.baselines] == [None, None]
