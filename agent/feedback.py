"""Tool results as the model reads them: concise, with what to fix first.

The first line of every text is a headline (status and the one number that matters); older tool
results are cut down to it when the context is bounded, so it has to stand alone.
"""

from __future__ import annotations

from agent.runlog.events import TimedKernel
from tools.results import (
    BenchResult,
    CaseResult,
    CompileResult,
    SanitizerReport,
    SanitizerRun,
    ShapeTiming,
    TimingStats,
)

MAX_ERRORS = 12
OUTPUT_HEAD = 1500
OUTPUT_TAIL = 1500


def head_tail(text: str, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> str:
    """Long compiler output keeps its start (the first error) and its end (the summary)."""
    text = text.strip()
    if len(text) <= head + tail + 100:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


def _diagnostics(result: CompileResult) -> list[str]:
    lines = []
    for err in result.errors[:MAX_ERRORS]:
        where = (
            f"line {err.candidate_line}" if err.candidate_line else (err.generated_file or "generated code")
        )
        lines.append(f"  {where}: {err.message}")
        if err.source_line:
            lines.append(f"      {err.source_line.strip()}")
    if len(result.errors) > MAX_ERRORS:
        lines.append(f"  ... and {len(result.errors) - MAX_ERRORS} more errors")
    return lines


def _resources(result: CompileResult) -> list[str]:
    lines = []
    for k in result.kernels:
        spills = f", spills {k.spill_stores}/{k.spill_loads} B" if (k.spill_stores or k.spill_loads) else ""
        smem = f", smem {k.shared_bytes} B" if k.shared_bytes else ""
        lines.append(f"  {k.name}: {k.registers} registers{spills}{smem}")
    return lines


def compile_text(result: CompileResult) -> str:
    cached = ", from cache" if result.cached else ""
    if result.ok:
        lines = [f"compile_kernel PASSED: kernel compiled without errors ({result.seconds:.1f} s{cached})."]
        lines += _resources(result)
        lines.append("Compiling proves only that it builds: call benchmark to check correctness and speed.")
        return "\n".join(lines)
    lines = [
        f"compile_kernel FAILED ({result.status}): {result.message.strip().splitlines()[0] if result.message.strip() else ''}"
    ]
    lines += _diagnostics(result)
    if result.output and not result.errors:
        lines.append(head_tail(result.output))
    elif result.message.strip().count("\n"):
        lines.append(head_tail(result.message))
    return "\n".join(lines)


def _stats(s: TimingStats | None) -> str:
    return f"{s.median_ms:.3f} ms ± {s.rse * 100:.1f}%" if s else "n/a"


def _timing_line(t: ShapeTiming) -> str:
    speed = f"{t.speedup:.2f}×" if t.speedup is not None else "no speedup"
    note = f" ({t.message})" if t.message else ""
    return f"  {t.name}{' [primary]' if t.primary else ''}: yours {_stats(t.candidate)} vs reference {_stats(t.reference)} -> {speed}{note}"


def _case_line(c: CaseResult) -> str:
    errs = []
    if c.max_abs_err is not None:
        errs.append(f"max_abs_err {c.max_abs_err:.3g}")
    if c.rel_l2_err is not None:
        errs.append(f"rel_l2 {c.rel_l2_err:.3g}")
    if c.worst_index is not None:
        errs.append(f"worst at {c.worst_index}: got {c.worst_value!r}, expected {c.worst_expected!r}")
    if c.mismatched is not None and c.numel:
        errs.append(f"{c.mismatched}/{c.numel} elements out of tolerance")
    detail = "; ".join(errs)
    msg = c.message.strip()
    return (
        f"  {c.name} {c.status.upper()} ({', '.join(f'{k}={v}' for k, v in c.sizes.items())}): "
        + "; ".join(x for x in (msg, detail) if x)
    )


def _best_line(best: TimedKernel | None, improved: bool) -> str:
    if best is None:
        return "Best so far: none correct yet."
    mark = " (this kernel: new best)" if improved else ""
    return f"Best so far: {best.speedup:.2f}× at {best.median_ms:.3f} ms ± {best.rse * 100:.1f}% ({best.kernel_path}, turn {best.turn}){mark}."


def sanitizer_text(report: SanitizerReport) -> str:
    """The sanitizer's verdict in one line: status, why, which tools at which case, seconds of its budget."""
    tools = ", ".join(r.tool for r in report.runs) or "no tool"
    where = f"{tools} at case {report.case}" if report.case else tools
    spent = f"; {report.seconds:.0f} s of a {report.budget_s:.0f} s budget" if report.budget_s else ""
    reused = "; reused: same kernel as before" if report.cached else ""
    return f"sanitizer {report.status}: {report.message} ({where}{spent}{reused})"


def sanitizer_run_text(run: SanitizerRun) -> str:
    count = f", {run.errors} errors" if run.errors else ""
    why = f": {run.message}" if run.message else ""
    return f"{run.tool}: {run.status}{count} ({run.seconds:.0f} s of {run.budget_s:.0f} s){why}"


def bench_headline(result: BenchResult) -> str:
    if result.correct and result.speedup is not None:
        return f"benchmark CORRECT: {result.speedup:.2f}× the reference's speed."
    if result.status == "suspect":
        why = next((f.message for f in result.flag_details if f.name == "timing_mismatch"), result.message)
        return f"benchmark SUSPECT: outputs correct, timing not trusted (no speedup counted): {why}"
    if result.status == "incorrect":
        failed = [c.name for c in result.cases if c.status in ("failed", "error")]
        what = f"{len(failed)} of {len(result.cases)} cases failed" if failed else "disqualified"
        return f"benchmark INCORRECT: {what}. {result.message.strip().splitlines()[0] if result.message.strip() else ''}".strip()
    first = result.message.strip().splitlines()[0] if result.message.strip() else ""
    return f"benchmark FAILED ({result.status}): {first}"


def bench_text(result: BenchResult, best: TimedKernel | None, improved: bool) -> str:
    lines = [bench_headline(result)]
    if result.compile is not None and not result.compile.ok:
        lines += compile_text(result.compile).splitlines()[1:]
    bad = [c for c in result.cases if c.status in ("failed", "error")]
    if bad:
        lines.append("Failing cases:")
        lines += [_case_line(c) for c in bad]
    passed = [c.name for c in result.cases if c.status == "passed"]
    if passed and bad:
        lines.append(f"Passed: {', '.join(passed)}")
    for flag in result.flag_details:
        lines.append(f"  flag {flag.name}{' (disqualifying)' if flag.disqualifying else ''}: {flag.message}")
    if result.sanitizer is not None:
        text = sanitizer_text(result.sanitizer)
        lines.append(text[0].upper() + text[1:])
    if result.timings:
        lines.append("Timings (median ± relative standard error):")
        lines += [_timing_line(t) for t in result.timings]
    if not result.correct and result.status not in ("ok", "incorrect") and result.output and not bad:
        lines.append(head_tail(result.output))
    elif result.status not in ("ok", "incorrect") and result.message.strip().count("\n"):
        lines.append(head_tail(result.message))
    lines.append(_best_line(best, improved))
    return "\n".join(lines)
