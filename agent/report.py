"""`agent report`: one self-contained HTML page for a run (no network: inline CSS, charts as inline SVG
drawn by agent.report_charts)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

from agent import toolbox
from agent.events import ToolCallEvent
from agent.fmt import SCRIPTED_LABEL, fmt_cost, fmt_duration, fmt_speedup, fmt_time, tokens_by_kind
from agent.report_charts import speedup_chart, time_chart, tokens_chart
from agent.result_view import CASE_COLUMNS, TIMING_COLUMNS, case_row, timing_row
from agent.run_view import model_label
from agent.rundata import RunData
from tools.results import BenchResult


def best_bench(run: RunData) -> BenchResult | None:
    """The BenchResult that chose the best kernel: best.json's, else the last correct benchmark of it."""
    if run.best and run.best.bench:
        chosen = toolbox.BENCHMARK.parse(run.best.bench)
        if chosen is not None:
            return chosen
    path = run.best_kernel_path
    calls = [e for e in run.events if isinstance(e, ToolCallEvent) and e.kernel_path == path]
    benches = [b for b in map(toolbox.parse_result, calls) if isinstance(b, BenchResult) and b.correct]
    return benches[-1] if benches else None


CSS = """
body { font-family: -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif; margin: 24px auto; max-width: 1180px;
       color: #1d1d1f; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px; border-bottom: 1px solid #ddd; }
h3 { font-size: 14px; margin: 18px 0 4px; }
.sub { color: #666; margin-top: 0; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { text-align: left; padding: 3px 12px 3px 0; vertical-align: top; }
th { color: #666; font-weight: 600; border-bottom: 1px solid #ddd; }
td.num, th.num { text-align: right; }
.kv th { border: none; padding-right: 18px; }
.ok { color: #2a9d4b; font-weight: 600; } .bad { color: #c0392b; font-weight: 600; }
.warn { color: #a86b00; } .scripted { color: #7a4fb0; font-weight: 600; }
.chart svg { width: 100%; height: auto; max-width: 1100px; }
pre, .source { font-size: 12px; background: #f7f7f9; padding: 8px; overflow-x: auto; border-radius: 4px; }
.source pre { background: none; padding: 0; margin: 0; }
"""


def esc(value: object) -> str:
    return html.escape(str(value))


def table_html(headers: list[str], rows: list[list[str]], numeric: Iterable[int] = ()) -> str:
    nums = set(numeric)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in nums else f"<th>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in nums else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def summary_html(run: RunData) -> str:
    info, env = run.info, run.info.environment
    status_class = {"killed": "bad", "running": "warn"}.get(run.status.state, "ok")
    message = run.summary.message if run.summary else ""
    scripted = f'<span class="scripted">{SCRIPTED_LABEL}</span>'
    rows = [
        ("problem", esc(f"{info.problem} ({info.config.problem_path})")),
        ("model", scripted if run.scripted else esc(model_label(run))),
        ("status", f'<span class="{status_class}">{esc(run.status.label)}</span> {esc(message)}'),
        ("turns", esc(run.turn_count)),
        (
            "time",
            esc(
                f"{fmt_duration(run.wall_seconds)} wall · {run.llm_seconds:.1f}s LLM · {run.tool_seconds:.1f}s tools"
            ),
        ),
        ("tokens", scripted if run.scripted else esc(tokens_by_kind(run.usage))),
        ("cost", scripted if run.scripted else esc(fmt_cost(run.cost_usd))),
        ("best", esc(f"{fmt_speedup(run.best_speedup)} · {run.best_kernel_path or 'no correct kernel'}")),
        ("machine", esc(" · ".join(x for x in (env.host, env.gpu, env.torch and f"torch {env.torch}") if x))),
    ]
    rows += [("note", f'<span class="warn">{esc(note)}</span>') for note in run.notes]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def turns_html(run: RunData) -> str:
    rows = []
    for turn in run.turns:
        calls = [
            f"{esc(c.name)} {esc(c.kernel_path or '')}: {status_span(c.status)}" for c in turn.tool_calls
        ]
        calls += [f'{esc(b.name)}: <span class="bad">no result logged</span>' for b in turn.unanswered]
        tokens = (
            SCRIPTED_LABEL if run.scripted else f"{turn.usage.tokens_in:,} / {turn.usage.output_tokens:,}"
        )
        label = turn.turn if turn.trajectory is None else f"t{turn.trajectory} · {turn.turn}"
        if run.parallel and turn.trajectory is None:
            label = "final re-check"
        rows.append(
            [
                esc(label) + ("" if turn.complete or label == "final re-check" else " (incomplete)"),
                f"{turn.turn_seconds:.1f}",
                f"{turn.llm_seconds:.1f}",
                f"{turn.tool_seconds:.1f}",
                esc(tokens),
                ", ".join(calls) or "–",
            ]
        )
    return table_html(
        ["turn", "turn s", "LLM s", "tools s", "tokens in / out", "tool calls"], rows, numeric=[1, 2, 3]
    )


def trajectories_html(run: RunData) -> str:
    rows = [
        [
            esc(t.number),
            esc(f"branch of {t.from_kernel}" if t.kind == "branch" else t.kind),
            esc(len(t.turns)),
            esc(len(t.benchmarks)),
            esc(fmt_speedup(t.best_speedup)),
            status_span(t.exit_status or "–"),
        ]
        for t in run.trajectories
    ]
    return table_html(["trajectory", "kind", "turns", "benchmarks", "best", "ended"], rows, numeric=[2, 3, 4])


def status_span(status: str) -> str:
    return f'<span class="{"ok" if status in ("ok", "passed") else "bad"}">{esc(status)}</span>'


def best_html(run: RunData) -> str:
    if run.best_speedup is None or run.best_kernel_path is None:
        return "<p>No correct kernel in this run.</p>"
    parts = [f"<p><b>{esc(fmt_speedup(run.best_speedup))}</b> · {esc(run.best_kernel_path)}"]
    if run.best:
        parts.append(f" · turn {run.best.turn}" + (" · re-checked at the end" if run.best.final else ""))
    parts.append("</p>")
    bench = best_bench(run)
    if bench:
        rows = [[esc(cell) for cell in case_row(c, short_sizes=False)] for c in bench.cases]
        for row, case in zip(rows, bench.cases, strict=True):
            row[2] = status_span(case.status)
        parts.append("<h3>Correctness per case</h3>")
        parts.append(table_html(list(CASE_COLUMNS), rows, numeric=[3, 4]))
        parts.append("<h3>Timing per shape (* primary)</h3>")
        rows = [[esc(cell) for cell in timing_row(t)] for t in bench.timings]
        parts.append(table_html(list(TIMING_COLUMNS), rows, numeric=[1, 2, 3, 4]))
    source = run.kernels.get("best.py") or run.kernels.get(run.best_kernel_path)
    if source is not None:
        parts.append(
            f"<h3>Source ({'best.py' if 'best.py' in run.kernels else esc(run.best_kernel_path)})</h3>"
        )
        parts.append(highlighted(source))
    return "".join(parts)


def highlighted(source: str) -> str:
    """Python source as HTML with inline styles (pygments, which rich already depends on)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return f'<div class="source">{highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, linenos="inline"))}</div>'


def build_report(run: RunData) -> str:
    """The whole page as one HTML string."""
    tokens = (
        f'<p class="scripted">{SCRIPTED_LABEL}: no model calls, no tokens.</p>'
        if run.scripted
        else f'<div class="chart">{tokens_chart(run)}</div>'
    )
    sections = [
        f"<h1>{esc(run.run_id)}</h1>",
        f'<p class="sub">{esc(run.info.problem)} · {esc(model_label(run))} · started {esc(fmt_time(run.info.started_at))}</p>',
        summary_html(run),
        "<h2>Speedup of each benchmarked candidate</h2>",
        f'<div class="chart">{speedup_chart(run)}</div>',
        "<h2>Time per turn: LLM vs tools</h2>",
        f'<div class="chart">{time_chart(run)}</div>',
        "<h2>Tokens per turn</h2>",
        tokens,
        *(["<h2>Trajectories</h2>", trajectories_html(run)] if run.parallel else []),
        "<h2>Turns</h2>",
        turns_html(run),
        "<h2>Best kernel</h2>",
        best_html(run),
    ]
    body = "\n".join(sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(run.run_id)} · kernel-agent report</title><style>{CSS}</style></head>"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_report(run: RunData, out: Path) -> Path:
    out.write_text(build_report(run), encoding="utf-8")
    return out
