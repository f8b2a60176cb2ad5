"""Pure renderers for `agent bench` results: data in, rich renderables out."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tools.results import BenchResult, CompileResult


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "—" if value is None else format(value, fmt)


def compile_lines(comp: CompileResult) -> Text:
    style = "green" if comp.status == "ok" else "red"
    text = Text.assemble(("compile ", "bold"), (comp.status, style), f" · {comp.message}")
    for k in comp.kernels:
        text.append(
            f"\n  {k.name[:70]}: {k.registers} regs, {k.spill_stores or 0}B spill st, {k.spill_loads or 0}B spill ld,"
            f" {k.stack_bytes or 0}B stack, {k.shared_bytes or 0}B smem"
        )
    return text


def cases_table(result: BenchResult) -> Table:
    table = Table(title="correctness (vs float64 truth)", title_justify="left", expand=False)
    for col in ("case", "verdict", "max abs err", "rel-L2", "detail"):
        table.add_column(col, overflow="fold")
    for c in result.cases:
        style = {"passed": "green", "failed": "red", "error": "red", "skipped": "dim"}[c.status]
        detail = "" if c.status == "passed" else c.message
        table.add_row(c.name, Text(c.status, style), _num(c.max_abs_err), _num(c.rel_l2_err), detail[:300])
    return table


def timings_table(result: BenchResult) -> Table:
    table = Table(title="timing (median)", title_justify="left")
    for col in ("shape", "candidate ms", "RSE", "reference ms", "speedup"):
        table.add_column(col)
    for t in result.timings:
        cand, ref = t.candidate, t.reference
        name = f"{t.name} *" if t.primary else t.name
        table.add_row(
            name,
            _num(cand.median_ms if cand else None, ".4g"),
            f"{cand.rse:.1%}" if cand else "—",
            _num(ref.median_ms if ref else None, ".4g") + (" (cached)" if t.reference_cached else ""),
            f"{t.speedup:.2f}×" if t.speedup else (t.message or "—"),
        )
    return table


def bench_result(result: BenchResult) -> RenderableType:
    verdict = "CORRECT" if result.correct else "NOT CORRECT"
    head = Text.assemble(
        (f"{verdict} ", "bold green" if result.correct else "bold red"),
        (f"[{result.status}] ", "bold"),
        f"speedup {result.speedup:.2f}×" if result.speedup else "speedup —",
        f" · {result.seconds:.1f} s · seed {result.seed}",
    )
    parts: list[RenderableType] = [head, Text(result.message)]
    if result.compile:
        parts.append(compile_lines(result.compile))
    for f in result.flag_details:
        parts.append(Text(f"flag {f.name}: {f.message}", "yellow"))
    if result.cases:
        parts.append(cases_table(result))
    if result.timings:
        parts.append(timings_table(result))
    if result.usage and result.usage.method != "unavailable":
        u = result.usage
        share = f", own kernels {u.own_share:.0%} of device time" if u.own_share is not None else ""
        parts.append(
            Text(f"kernel usage ({u.method}): {u.own_calls_per_forward} own calls per forward{share}")
        )
    env = result.env
    parts.append(
        Text(f"{env.gpu or 'CPU'} · torch {env.torch} · CUDA {env.cuda} · harness {env.harness_sha}", "dim")
    )
    return Group(*parts)
