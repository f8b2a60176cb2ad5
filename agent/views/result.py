"""The one view of each harness result (`CompileResult`, `BenchResult`): rich renderables for
`agent show`, the live display and `agent bench`, and the table rows the HTML report shares."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agent.views.fmt import BAD_STYLE, DIM, OK_STYLE, fmt_err, fmt_ms, fmt_seconds, fmt_speedup
from tools.benchmark import sanitizer_run_text, sanitizer_text
from tools.figure_data import EAGER_LABEL, HEADLINE_LABELS, Figures, format_metric
from tools.figures import figures_of, shape_figures
from tools.floor import floor_text, peaks_text
from tools.kbfile import SizeValue
from tools.profile_results import ProfileResult
from tools.results import (
    NOT_APPLICABLE,
    BaselineReport,
    BenchResult,
    CaseResult,
    CompileResult,
    Diagnostic,
    KernelUsage,
    SanitizerReport,
    ShapeTiming,
)

CASE_COLUMNS = ("case", "sizes", "status", "max abs", "rel L2", "why")
# The headline's columns, named as everywhere (tools/figure_data.py): % of floor, the launch-free speedup; the
# eager reference and its speedup after them, secondary.
TIMING_COLUMNS = ("shape", "candidate", "rse", "% of floor", "launch-free ref", "speedup (launch-free ref)",
                  "eager ref", EAGER_LABEL)  # fmt: skip
SHORT_SIZES = {"batch_size": "B", "seq_len": "L", "d_model": "D", "d_state": "N"}


def first_error_line(result: CompileResult | BenchResult | ProfileResult | None) -> int | None:
    """The candidate's line of its first compile error, if the result has one."""
    compiled = result.compile if isinstance(result, BenchResult | ProfileResult) else result
    if compiled is None:
        return None
    return next((d.candidate_line for d in compiled.errors if d.candidate_line), None)


def diagnostic_view(diag: Diagnostic, kernel_path: str | None) -> Text:
    if diag.candidate_line is not None:
        where = f"{kernel_path or 'kernel'}:{diag.candidate_line}"
    else:
        where = f"{diag.generated_file or 'generated'}:{diag.generated_line or '?'}"
    text = Text.assemble((where, "bold"), ": ", (f"error: {diag.message}", BAD_STYLE))
    if diag.source_line:
        text.append(f"\n    {diag.source_line}", style=DIM)
    return text


def missing_guards(containment: list[str]) -> list[str]:
    """The guards the candidate's worker ran without (tools.supervise.isolation.observe's wording)."""
    return [c for c in containment if c.startswith("uncontained")]


def containment_text(containment: list[str]) -> str:
    """How the candidate's worker was contained, as the harness saw it; a missing guard in words."""
    missing = missing_guards(containment)
    if missing:
        return "; ".join(missing)
    return "contained: " + ", ".join(c.replace("_", " ") for c in containment)


def compile_view(
    result: CompileResult, kernel_path: str | None, full: bool = False
) -> Iterator[RenderableType]:
    if result.ok:
        cached = " (cached)" if result.cached else ""
        if result.message.startswith("compiled "):  # "compiled 1 extension in 34.4 s": said once
            yield Text(f"{result.message}{cached}", style=OK_STYLE)
        else:
            yield Text(f"compiled in {fmt_seconds(result.seconds)}{cached}: {result.message}", style=OK_STYLE)
    else:
        yield Text(f"{result.status}: {result.message}", style=BAD_STYLE)
    if missing_guards(result.containment):  # never silent: the candidate ran less contained than asked
        yield Text(containment_text(result.containment), style="yellow")
    for diag in result.errors:
        yield diagnostic_view(diag, kernel_path)
    for kernel in result.kernels:
        spills = (kernel.spill_stores or 0) + (kernel.spill_loads or 0)
        registers = "?" if kernel.registers is None else kernel.registers
        memory = f", {kernel.stack_bytes or 0} B stack, {kernel.shared_bytes or 0} B smem" if full else ""
        yield Text(f"{kernel.name}: {registers} registers, {spills} spill bytes{memory}", style=DIM)


def sizes_text(sizes: dict[str, SizeValue], short: bool) -> str:
    return " ".join(f"{SHORT_SIZES.get(k, k) if short else k}={v}" for k, v in sizes.items())


def case_row(case: CaseResult, short_sizes: bool = True) -> list[str]:
    """One row under CASE_COLUMNS."""
    sizes = sizes_text(case.sizes, short_sizes)
    return [case.name, sizes, case.status, fmt_err(case.max_abs_err), fmt_err(case.rel_l2_err), case.message]


def timing_row(timing: ShapeTiming) -> list[str]:
    """One row under TIMING_COLUMNS; the primary shape is starred. The launch-free reference: its graph's
    replays, or `eager` where the eager reference stands in (a CPU problem, a capture that failed)."""
    cand, ref, lf = timing.candidate, timing.reference, timing.launch_free
    figures = shape_figures(timing)
    graph = lf is not None and lf.mode == "graph" and lf.stats is not None
    return [
        timing.name + (" *" if timing.primary else ""),
        fmt_ms(cand.median_ms if cand else None),
        f"{cand.rse:.1%}" if cand else "–",
        format_metric("floor_fraction", figures.floor_fraction) if figures.floor_ms is not None else "–",
        fmt_ms(lf.stats.median_ms) if graph and lf is not None and lf.stats is not None else "eager",
        fmt_speedup(timing.speedup) + interval_text(timing.speedup_interval),
        fmt_ms(ref.median_ms if ref else None),
        fmt_speedup(figures.eager_speedup),
    ]


def interval_text(interval: tuple[float, float] | None) -> str:
    """` (95% 3.9–4.2×)` beside a speedup ("" where no spread is known)."""
    return "" if interval is None else f" (95% {fmt_speedup(interval[0])[:-1]}–{fmt_speedup(interval[1])})"


def plain_table(columns: tuple[str, ...], right: tuple[str, ...] = ()) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style=DIM)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    return table


def cases_table(cases: list[CaseResult], all_cases: bool) -> Table:
    table = plain_table(CASE_COLUMNS)
    for case in cases:
        if all_cases or case.status != "passed":
            name, sizes, status, *rest = case_row(case)
            table.add_row(
                name, sizes, Text(status, style=OK_STYLE if status == "passed" else BAD_STYLE), *rest
            )
    return table


def timings_table(timings: list[ShapeTiming]) -> Table:
    table = plain_table(TIMING_COLUMNS, right=TIMING_COLUMNS[1:])
    for timing in timings:
        table.add_row(*timing_row(timing))
    return table


def headline_text(figures: Figures) -> str:
    """`% of floor 41% · speedup (launch-free ref) 3.10× · eager speedup 125×`: the headline first."""
    parts = [figures.headline_text()]
    if figures.metric == "floor_fraction":
        parts.append(f"{HEADLINE_LABELS['launch_free_speedup']} {fmt_speedup(figures.speedup)}")
    parts.append(f"{EAGER_LABEL} {fmt_speedup(figures.eager_speedup)}")
    return " · ".join(parts)


def bench_verdict(result: BenchResult) -> Text:
    if result.correct and result.speedup is not None:
        primary = result.primary_timing
        text = Text(f"correct · {headline_text(result.figures or figures_of(result))}", style=OK_STYLE)
        if primary and primary.candidate and primary.reference:
            text.append(
                f" ({primary.name}: {fmt_ms(primary.candidate.median_ms)}, eager reference "
                f"{fmt_ms(primary.reference.median_ms)}, rse {primary.candidate.rse:.1%})",
                style=DIM,
            )
        return text
    return Text(f"{result.status}: {result.message}", style=BAD_STYLE)


def usage_line(usage: KernelUsage) -> Text | None:
    if usage.own_share is None:
        return None
    return Text(usage_text(usage), style=DIM)


def usage_text(usage: KernelUsage) -> str:
    """`device time: own kernels 41% · gemm 59%` (on the CPU: `CPU time: own code 13% · elementwise 87%`), and
    on CUDA the host time from the call's start to its first launch, where measured."""
    cpu = usage.method == "cpu_profiler"
    shares = [f"{'own code' if cpu else 'own kernels'} {usage.own_share or 0:.0%}"]
    shares += [f"{k} {v:.0%}" for k, v in usage.library_share.items()]
    launch = f" · first launch {usage.first_launch_ms:.3f} ms into the call" if usage.first_launch_ms else ""
    return f"{'CPU time' if cpu else 'device time'}: " + " · ".join(shares) + launch


SANITIZER_STYLE = {"clean": OK_STYLE, "flagged": BAD_STYLE, "incomplete": "yellow", "unavailable": "yellow"}


def sanitizer_view(report: SanitizerReport, full: bool) -> Iterator[RenderableType]:
    """The sanitizer's verdict; `full`: each tool's run as well."""
    yield Text(sanitizer_text(report), style=SANITIZER_STYLE[report.status])
    if full:
        for run in report.runs:
            yield Text(f"  {sanitizer_run_text(run)}", style=DIM)


def bench_view(result: BenchResult, kernel_path: str | None, full: bool = False) -> Iterator[RenderableType]:
    """The verdict, what failed, the timings; `full`: every case and the build as well."""
    yield bench_verdict(result)
    if result.compile and (full or not result.compile.ok):
        build = compile_view(result.compile, kernel_path, full)
        if not result.compile.ok and result.compile.message == result.message:
            next(build)  # its status line is the verdict's, said just above
        yield from build
    if result.cases:
        passed = sum(c.status == "passed" for c in result.cases)
        moot = sum(c.message.startswith(NOT_APPLICABLE) for c in result.cases)  # an input variant, moot
        style = OK_STYLE if passed + moot == len(result.cases) else BAD_STYLE
        moot_text = f" ({moot} not applicable)" if moot else ""
        yield Text(f"{passed}/{len(result.cases) - moot} correctness cases passed{moot_text}", style=style)
        if full or passed < len(result.cases):
            yield cases_table(result.cases, all_cases=full)
    for flag in result.flag_details:
        if result.message and flag.message.startswith(result.message):
            continue  # the verdict above already says it
        yield Text(f"flag {flag.name}: {flag.message}", style=BAD_STYLE if flag.disqualifying else "yellow")
    if result.sanitizer is not None:
        yield from sanitizer_view(result.sanitizer, full)
    if result.timings:
        yield timings_table(result.timings)
    yield from floor_view(result, full)
    yield from reference_view(result)
    if result.baselines is not None:
        yield from baselines_view(result.baselines)
    cached = [t.name for t in result.timings if t.reference_cached]
    if full and cached:
        yield Text(f"reference times from the cache: {', '.join(cached)}", style=DIM)
    for t in result.timings:
        cached_stood = t.reference is not None and t.reference_cached and t.reference.windows is None
        if full and t.reference_check is not None and cached_stood and t.reference is not None:
            yield Text(
                f"{t.name}: the cached reference ({t.reference.median_ms:.3f} ms) agreed with the reference "
                f"timed beside the candidate ({t.reference_check.median_ms:.3f} ms)",
                style=DIM,
            )
    for notice in result.notices:
        yield Text(f"note: {notice}", style="yellow")
    line = usage_line(result.usage) if result.usage else None
    if line is not None:
        yield line


def reference_view(result: BenchResult) -> Iterator[Text]:
    """Where the launch-free reference is the eager one, why; where the problem has no floor, that."""
    if not any(t.candidate is not None for t in result.timings):
        return
    figures = result.figures or figures_of(result)
    if figures.reference_note:
        yield Text(f"launch-free reference: eager ({figures.reference_note})", style=DIM)
    if figures.floor_status != "derived":
        yield Text(figures.floor_note, style=DIM)


def floor_view(result: BenchResult, full: bool) -> Iterator[Text]:
    """Each timed shape's speed-of-light floor and the kernel's share of it; `full`: the peaks too."""
    said = [f"{t.name}: {floor_text(t)}" for t in result.timings if floor_text(t)]
    if said:
        yield Text("speed-of-light " + "; ".join(said), style=DIM)
    if full and result.peaks is not None:
        yield Text(f"peaks: {peaks_text(result.peaks)}", style=DIM)


BASELINE_COLUMNS = ("baseline", "median ms", "rse", "yours vs it", "ready", "rel L2 vs ref", "note")


def baselines_view(report: BaselineReport) -> Iterator[RenderableType]:
    """Each baseline at the primary shape, and the kernel's speedup against it."""
    yield Text(f"baselines at {report.shape} (trusted side, {fmt_seconds(report.seconds)}):", style=DIM)
    table = plain_table(BASELINE_COLUMNS, right=BASELINE_COLUMNS[1:6])
    for b in report.baselines:
        table.add_row(
            b.name,
            fmt_ms(b.stats.median_ms if b.stats else None),
            f"{b.stats.rse:.1%}" if b.stats else "–",
            fmt_speedup(b.speedup),
            fmt_seconds(b.ready_s) if b.ready_s is not None else "–",
            fmt_err(b.rel_l2_vs_reference),
            b.message if b.status == "ok" else f"{b.status}: {b.message}",
        )
    yield table


def measured_line(result: BenchResult) -> Text:
    """How long, with which seed, on what: leaving out what this evaluation did not have (no seed when it
    stopped before drawing one, no CUDA on a CPU build of torch)."""
    env = result.env
    parts = [fmt_seconds(result.seconds)]
    if result.seed is not None:
        parts.append(f"seed {result.seed}")
    parts += [f"{result.workers} workers", env.gpu or "CPU", f"torch {env.torch}"]
    if env.cuda:
        parts.append(f"CUDA {env.cuda}")
    parts.append(f"harness {env.harness_sha}")
    if env.containment:
        parts.append(containment_text(env.containment))
    return Text(" · ".join(parts), style=DIM)


def bench_page(result: BenchResult, kernel_path: str | None = None) -> RenderableType:
    """`agent bench`: the full view, then where and how it was measured."""
    return Group(*bench_view(result, kernel_path, full=True), measured_line(result))
