"""What the model reads back from the tools: headline first, errors at its own lines, long output cut
in the middle, failing cases with their errors, timings with spread, the best so far."""

from __future__ import annotations

from agent.runlog.events import TimedKernel
from tools.benchmark import text as bench_text
from tools.compile_kernel import head_tail
from tools.compile_kernel import text as compile_text
from tools.judge._verdicts import cases_line
from tools.results import (
    BenchResult,
    CaseResult,
    CompileResult,
    Diagnostic,
    LaunchFreeReference,
    ShapeTiming,
    TimingStats,
)


def stats(ms: float, rse: float) -> TimingStats:
    return TimingStats(median_ms=ms, rse=rse, n=10, min_ms=ms, max_ms=ms, mean_ms=ms)


def test_compile_errors_point_at_the_candidate_lines() -> None:
    result = CompileResult(
        status="compile_error",
        message="build failed: 2 errors",
        errors=[
            Diagnostic(message="error: 'foo' was not declared", candidate_line=42, source_line="  foo(x);"),
            Diagnostic(message="error: expected ';'", generated_file="main.cpp", generated_line=7),
        ],
    )
    text = compile_text(result)
    lines = text.splitlines()
    assert lines[0] == "compile_kernel FAILED (compile_error): build failed: 2 errors"
    assert "  line 42: error: 'foo' was not declared" in lines
    assert "      foo(x);" in lines
    assert "  main.cpp: error: expected ';'" in lines


def test_long_output_keeps_head_and_tail() -> None:
    text = "FIRST ERROR\n" + "noise\n" * 5000 + "LAST LINE"
    cut = head_tail(text, 200, 200)
    assert cut.startswith("FIRST ERROR")
    assert cut.endswith("LAST LINE")
    assert "characters cut" in cut
    assert len(cut) < 600
    assert head_tail("short") == "short"


def test_benchmark_text_names_failing_cases_timings_and_best() -> None:
    result = BenchResult(
        status="incorrect",
        correct=False,
        speedup=None,
        message="1 of 2 cases failed",
        cases=[
            CaseResult(name="odd", status="passed", sizes={"seq_len": 333}),
            CaseResult(
                name="long_memory",
                status="failed",
                sizes={"seq_len": 2100},
                max_abs_err=4.4e-4,
                rel_l2_err=1.6e-6,
                mismatched=9,
                numel=268800,
            ),
        ],
    )
    best = TimedKernel(turn=2, kernel_path="kernels/002.py", speedup=1.6, median_ms=300.0, rse=0.01)
    text = bench_text(result, best, improved=False)
    assert text.splitlines()[0].startswith("benchmark INCORRECT: 1 of 2 cases failed")
    assert "long_memory FAILED (seq_len=2100): max_abs_err 0.00044; rel_l2 1.6e-06; 9/268800 elements" in text
    assert "Passed: odd" in text
    assert "Best so far: 1.60× at 300.000 ms ± 1.0% (kernels/002.py, turn 2)." in text


def test_benchmark_text_of_a_correct_kernel() -> None:
    timing = ShapeTiming(
        name="b8",
        primary=True,
        sizes={},
        candidate=stats(100.0, 0.02),
        reference=stats(400.0, 0.01),
        launch_free=LaunchFreeReference(mode="graph", stats=stats(40.0, 0.01)),
        speedup=0.4,
        eager_speedup=4.0,
    )
    result = BenchResult(status="ok", correct=True, speedup=0.4, message="ok", timings=[timing])
    best = TimedKernel(turn=3, kernel_path="kernels/003.py", speedup=0.4, median_ms=100.0, rse=0.02)
    text = bench_text(result, best, improved=True)
    assert text.splitlines()[0] == (
        "benchmark CORRECT: speedup (launch-free ref) 0.40× (the headline), eager speedup 4.00×."
    )
    assert (
        "  b8 [primary]: yours 100.000 ms ± 2.0% vs reference replayed from a CUDA graph 40.000 ms ± 1.0% -> "
        "0.40×; eager reference 400.000 ms ± 1.0% -> 4.00×" in text
    )
    assert text.endswith("(this kernel: new best).")


def test_best_is_replaced_only_beyond_the_measured_spread() -> None:
    from agent.best import beats

    best = TimedKernel(turn=1, kernel_path="kernels/001.py", speedup=2.0, median_ms=100.0, rse=0.02)
    assert beats(100.0, 0.02, None)
    assert not beats(97.0, 0.02, best)  # 3% faster, inside 2 standard errors of both medians
    assert beats(90.0, 0.01, best)
    assert not beats(101.0, 0.0, best)


def case(name: str, status: str) -> CaseResult:
    return CaseResult(name=name, status=status, message="stuck" if status == "error" else "")  # type: ignore[arg-type]


def test_cases_a_timeout_never_reached_are_not_run_not_failed() -> None:
    cases = [case("odd", "error"), case("long", "skipped"), case("big", "skipped")]
    assert cases_line(cases) == "1 of 3 cases failed, 2 not run; first: odd: stuck"


def test_cases_line_counts_failures_and_says_when_all_passed() -> None:
    assert cases_line([case("a", "passed"), case("b", "failed")]).startswith("1 of 2 cases failed; first: b")
    assert cases_line([case("a", "passed"), case("b", "skipped")]) == "1 of 2 cases not run"
    assert cases_line([case("a", "passed")]) == "all 1 correctness cases passed"


def test_a_speedup_comes_with_its_interval_from_both_spreads() -> None:
    """4x from medians with 2 % and 1 % relative standard errors: ±1.96·√(0.02² + 0.01²) on the log scale."""
    import math

    from tools.judge._ratio import speedup_interval, too_wide

    low, high = speedup_interval(stats(400.0, 0.01), stats(100.0, 0.02)) or (0.0, 0.0)
    half = 1.959964 * math.hypot(0.01, 0.02)
    assert (low, high) == (4.0 * math.exp(-half), 4.0 * math.exp(half))
    assert (round(low, 2), round(high, 2)) == (3.83, 4.18)
    assert not too_wide((low, high))
    assert too_wide(speedup_interval(stats(400.0, 0.08), stats(100.0, 0.05)))  # 1.45x from low to high
    assert speedup_interval(stats(400.0, float("inf")), stats(100.0, 0.02)) is None  # one call: no spread


def test_the_model_reads_the_interval_and_whether_it_ranks() -> None:
    from tools.judge._ratio import speedup_interval

    def line(ref_rse: float, cand_rse: float, windows: int | None = None) -> str:
        ref, cand = stats(400.0, ref_rse).model_copy(update={"windows": windows}), stats(100.0, cand_rse)
        timing = ShapeTiming(
            name="b8", primary=True, sizes={}, candidate=cand, reference=ref, speedup=4.0,
            speedup_interval=speedup_interval(ref, cand),
        )  # fmt: skip
        result = BenchResult(status="ok", correct=True, speedup=4.0, message="ok", timings=[timing])
        return next(x for x in bench_text(result, None, improved=False).splitlines() if "b8 [primary]" in x)

    assert line(0.01, 0.02).endswith("-> 4.00× (95% 3.83–4.18×)")
    assert line(0.08, 0.05).endswith("-> 4.00× (95% 3.32–4.81×: too wide to rank against a kernel inside it)")
    # On a GPU, a reference pooled over its windows (tools/judge/_paired.py): the width is the reference's.
    pooled = line(0.08, 0.05, windows=9)
    assert pooled.endswith(
        "(95% 3.32–4.81×: the reference's windows on this host vary this much; rank kernels by their own times)"
    )


def test_the_result_table_shows_the_interval_beside_the_speedup() -> None:
    from agent.views.result import timing_row
    from tools.judge._ratio import speedup_interval

    ref, cand = stats(400.0, 0.01), stats(100.0, 0.02)
    row = timing_row(
        ShapeTiming(name="b8", primary=True, sizes={}, candidate=cand, reference=ref, speedup=4.0,
                    speedup_interval=speedup_interval(ref, cand))
    )  # fmt: skip
    assert row[5] == "4.00× (95% 3.83–4.18×)"  # speedup (launch-free ref): an older result's, eager
    assert row[-1] == "4.00×"  # the eager speedup column: the same, for a result from before launch-free ones
    assert timing_row(ShapeTiming(name="b8", primary=False, sizes={}, speedup=4.0))[5] == "4.00×"
