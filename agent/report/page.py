"""`agent report`: a run as one self-contained HTML page that reads with no network (inline CSS, one
inline script, charts as inline SVG drawn by agent.report.charts): the summary and charts, then every turn
whole (agent.report.turns), a parallel run's trajectories side by side, and the best kernel; keys move
between the turns (agent.report.assets)."""

from __future__ import annotations

from pathlib import Path

from agent import toolbox
from agent.report.assets import CSS, SCRIPT
from agent.report.charts import recheck_note, shape_charts, speedup_chart, time_chart, tokens_chart
from agent.report.turns import (
    esc,
    highlighted,
    lanes_html,
    nav_html,
    source_css,
    status_span,
    table_html,
    turns_html,
)
from agent.runlog.data import RunData
from agent.runlog.events import ToolCallEvent
from agent.views.fmt import (
    SCRIPTED_LABEL,
    fmt_cost,
    fmt_duration,
    fmt_figures,
    fmt_time,
    tokens_by_kind,
)
from agent.views.result import CASE_COLUMNS, TIMING_COLUMNS, case_row, timing_row
from agent.views.run import model_label
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


def summary_html(run: RunData) -> str:
    info, env = run.info, run.info.environment
    status_class = (
        "bad" if run.status.failed else {"killed": "bad", "running": "warn"}.get(run.status.state, "ok")
    )
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
                + (f" · {run.recheck_seconds:.1f}s final re-check" if run.recheck_seconds else "")
            ),
        ),
        ("tokens", scripted if run.scripted else esc(tokens_by_kind(run.usage))),
        ("cost", scripted if run.scripted else esc(fmt_cost(run.cost_usd))),
        (
            "best",
            esc(
                f"{fmt_figures(run.best_kernel, run.best_speedup)} · {run.best_kernel_path or 'no correct kernel'}"
            ),
        ),
        ("machine", esc(" · ".join(x for x in (env.host, env.gpu, env.torch and f"torch {env.torch}") if x))),
    ]
    rows += [("note", f'<span class="warn">{esc(note)}</span>') for note in run.notes]
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def best_html(run: RunData) -> str:
    if run.best_speedup is None or run.best_kernel_path is None:
        return "<p>No correct kernel in this run.</p>"
    parts = [f"<p><b>{esc(fmt_figures(run.best_kernel, run.best_speedup))}</b> · {esc(run.best_kernel_path)}"]
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
        parts.append(table_html(list(TIMING_COLUMNS), rows, numeric=[1, 2, 3, 4, 5, 6, 7]))
    source = run.kernels.get("best.py") or run.kernels.get(run.best_kernel_path)
    if source is not None:
        parts.append(
            f"<h3>Source ({'best.py' if 'best.py' in run.kernels else esc(run.best_kernel_path)})</h3>"
        )
        parts.append(highlighted(source))
    return "".join(parts)


def build_report(run: RunData) -> str:
    """The whole page as one HTML string."""
    tokens = (
        f'<p class="scripted">{SCRIPTED_LABEL}: no model calls, no tokens.</p>'
        if run.scripted
        else tokens_chart(run)
    )
    shapes = shape_charts(run)
    overview = [
        '<section id="overview">',
        "<h2>Speedup of each benchmarked candidate</h2>",
        f'<div class="chart">{speedup_chart(run)}</div>',
        *([f'<p class="note" id="recheck-note">{esc(note)}</p>'] if (note := recheck_note(run)) else []),
        *(
            [
                "<h2>Each timed shape over the turns (* primary)</h2>",
                f'<div class="shapes">{"".join(shapes)}</div>',
            ]
            if shapes
            else []
        ),
        '<div class="pair"><div>',
        "<h2>Time per turn: LLM vs tools</h2>",
        time_chart(run),
        "</div><div>",
        "<h2>Tokens per turn</h2>",
        tokens,
        "</div></div>",
        "</section>",
    ]
    main = [
        *overview,
        *(['<h2 id="trajectories">Trajectories side by side</h2>', lanes_html(run)] if run.parallel else []),
        '<section id="turns">',
        *([] if run.parallel else ["<h2>Turns</h2>"]),
        turns_html(run),
        "</section>",
        '<h2 id="best-kernel">Best kernel</h2>',
        best_html(run),
    ]
    header = [
        f"<h1>{esc(run.run_id)}</h1>",
        f'<p class="sub">{esc(run.info.problem)} · {esc(model_label(run))} · started {esc(fmt_time(run.info.started_at))}</p>',
        summary_html(run),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(run.run_id)} · kernel-agent report</title><style>{CSS}{source_css()}</style></head>"
        f"<body>\n<header>{''.join(header)}</header>\n"
        f'<div class="layout">{nav_html(run)}<main>\n' + "\n".join(main) + "\n</main></div>\n"
        f"<script>{SCRIPT}</script>\n</body></html>\n"
    )


def write_report(run: RunData, out: Path) -> Path:
    out.write_text(build_report(run), encoding="utf-8")
    return out
