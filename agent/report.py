"""`agent report`: one self-contained HTML page for a run (no network: inline CSS, charts as inline SVG).

Charts are drawn with matplotlib (imported inside the chart functions, so `agent show` stays light).
Every plotted artist carries an SVG id (`gid`) naming what it shows — `speedup-ok`, `best-so-far`,
`llm-seconds-3`, `tokens-output-2` — so the figures can be read back from the page itself.
"""

from __future__ import annotations

import html
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from agent.events import ToolCallEvent, Usage
from agent.render import (
    SCRIPTED_LABEL,
    fmt_cost,
    fmt_duration,
    fmt_err,
    fmt_ms,
    fmt_speedup,
    fmt_time,
    model_label,
)
from agent.rundata import RunData
from tools.results import BenchResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LLM_COLOR, TOOL_COLOR = "#4c72b0", "#dd8452"
OK_COLOR, BAD_COLOR, BEST_COLOR, FINAL_COLOR = "#2a9d4b", "#c0392b", "#1b4f72", "#e0a800"
TOKEN_KINDS: list[tuple[str, str, str]] = [
    ("input", "input_tokens", "#4c72b0"),
    ("cache-read", "cache_read_tokens", "#9fb7d9"),
    ("cache-write", "cache_write_tokens", "#8172b3"),
    ("output", "output_tokens", "#55a868"),
]


@dataclass(frozen=True)
class Candidate:
    """One `benchmark` call: its turn, kernel, status and speedup (None unless correct)."""

    turn: int
    kernel_path: str
    status: str
    speedup: float | None


def parse_bench(call: ToolCallEvent) -> BenchResult | None:
    if call.name not in ("benchmark", "final_recheck") or not call.result:
        return None
    try:
        return BenchResult.model_validate(call.result)
    except ValidationError:
        return None


def candidates(run: RunData, tool: str = "benchmark") -> list[Candidate]:
    """Every call of `tool` (`benchmark`, or `final_recheck` for the end-of-run re-measurements)."""
    found: list[Candidate] = []
    for event in run.events:
        if isinstance(event, ToolCallEvent) and event.name == tool:
            bench = parse_bench(event)
            speedup = bench.speedup if bench and bench.correct else None
            found.append(Candidate(event.turn, event.kernel_path or "?", event.status, speedup))
    return found


def best_so_far(found: list[Candidate], last_turn: int) -> list[tuple[int, float]]:
    """(turn, best correct speedup up to that turn) from the first correct candidate to `last_turn`."""
    points: list[tuple[int, float]] = []
    best: float | None = None
    for turn in range(1, last_turn + 1):
        for candidate in (c for c in found if c.turn == turn and c.speedup is not None):
            best = candidate.speedup if best is None else max(best, candidate.speedup or 0.0)
        if best is not None:
            points.append((turn, best))
    return points


def best_bench(run: RunData) -> BenchResult | None:
    """The BenchResult that chose the best kernel: best.json's, else the last correct benchmark of it."""
    if run.best and run.best.bench:
        try:
            return BenchResult.model_validate(run.best.bench)
        except ValidationError:
            pass
    path = run.best_kernel_path
    calls = [e for e in run.events if isinstance(e, ToolCallEvent) and e.kernel_path == path]
    benches = [b for b in (parse_bench(c) for c in calls) if b and b.correct]
    return benches[-1] if benches else None


# ---------------------------------------------------------------- charts


def new_figure(height: float = 3.2) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(9.0, height), layout="constrained")
    ax = fig.add_subplot()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.set_xlabel("turn")
    return fig, ax


def figure_svg(fig: Figure, salt: str) -> str:
    """The figure as an `<svg>` element (no XML prolog, no metadata), text kept as text."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(
            buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None}
        )
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def thousands(ax: Axes) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:,.0f}"))


def speedup_chart(run: RunData) -> str:
    found = candidates(run)
    fig, ax = new_figure()
    ax.set_gid("speedup-chart")
    ax.set_ylabel("speedup vs reference (×)")
    turns = max((t.turn for t in run.turns), default=0) if run.parallel else run.turn_count  # per trajectory
    last_turn = max(turns, max((c.turn for c in found), default=0), 1)
    ax.axhline(1.0, color="#999999", linestyle=":", linewidth=1, gid="reference-line", label="reference (1×)")
    ok = [c for c in found if c.speedup is not None]
    failed = [c for c in found if c.speedup is None]
    if ok:
        ax.plot(
            [c.turn for c in ok],
            [c.speedup for c in ok],
            "o",
            color=OK_COLOR,
            gid="speedup-ok",
            label="correct",
        )
        for c in ok:
            ax.annotate(
                fmt_speedup(c.speedup),
                (c.turn, c.speedup or 0),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=8,
            )
    if failed:
        ax.plot(
            [c.turn for c in failed],
            [0.0] * len(failed),
            "x",
            color=BAD_COLOR,
            markersize=8,
            mew=2,
            gid="speedup-failed",
            label="failed (no speedup)",
            clip_on=False,
        )
        for c in failed:
            ax.annotate(
                c.status,
                (c.turn, 0.0),
                textcoords="offset points",
                xytext=(7, 3),
                fontsize=8,
                color=BAD_COLOR,
            )
    line = best_so_far(found, last_turn)
    if line:
        ax.plot(
            [t for t, _ in line],
            [s for _, s in line],
            drawstyle="steps-post",
            color=BEST_COLOR,
            linewidth=1.5,
            gid="best-so-far",
            label="best so far",
        )
    final = [c for c in candidates(run, "final_recheck") if c.speedup is not None]
    if final:
        ax.plot(
            [c.turn for c in final],
            [c.speedup for c in final],
            "*",
            color=FINAL_COLOR,
            markersize=13,
            markeredgecolor="#7a5c00",
            gid="speedup-final",
            label="final re-check",
        )
        for c in final:
            ax.annotate(
                f"re-check {fmt_speedup(c.speedup)}",
                (c.turn, c.speedup or 0.0),
                textcoords="offset points",
                xytext=(-8, 8),
                ha="right",
                fontsize=8,
            )
    ax.set_xlim(0.5, last_turn + 0.5)
    ax.set_ylim(0, 1.18 * max([c.speedup or 0.0 for c in found + final] + [1.0]))
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    return figure_svg(fig, "speedup")


def stacked_bars(ax: Axes, turns: list[int], layers: Iterable[tuple[str, list[float], str, str]]) -> None:
    """Stacked bars, one per turn; each rectangle gets the gid `<name>-<turn>`."""
    bottoms = [0.0] * len(turns)
    for name, values, color, label in layers:
        bars = ax.bar(turns, values, bottom=bottoms, color=color, label=label, width=0.6)
        for turn, patch in zip(turns, bars.patches, strict=True):
            patch.set_gid(f"{name}-{turn}")
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]


def legend_above(ax: Axes, columns: int) -> None:
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=columns, fontsize=8, frameon=False)


def bar_positions(run: RunData) -> list[int]:
    """One bar per turn: at its number, or (a parallel run, whose trajectories share numbers) in log order."""
    return list(range(1, len(run.turns) + 1)) if run.parallel else [t.turn for t in run.turns]


def time_chart(run: RunData) -> str:
    turns = run.turns
    fig, ax = new_figure()
    ax.set_gid("time-chart")
    ax.set_ylabel("seconds")
    numbers = bar_positions(run)
    stacked_bars(
        ax,
        numbers,
        [
            ("llm-seconds", [t.llm_seconds for t in turns], LLM_COLOR, "LLM"),
            ("tool-seconds", [t.tool_seconds for t in turns], TOOL_COLOR, "tools"),
        ],
    )
    ax.set_xlim(0.4, max(numbers, default=1) + 0.6)
    legend_above(ax, 2)
    return figure_svg(fig, "time")


def tokens_chart(run: RunData) -> str:
    turns = run.turns
    fig, ax = new_figure()
    ax.set_gid("tokens-chart")
    ax.set_ylabel("tokens")
    thousands(ax)
    numbers = bar_positions(run)
    layers = [
        (f"tokens-{kind}", [float(getattr(t.usage, field)) for t in turns], color, kind.replace("-", " "))
        for kind, field, color in TOKEN_KINDS
    ]
    stacked_bars(ax, numbers, layers)
    ax.set_xlim(0.4, max(numbers, default=1) + 0.6)
    legend_above(ax, len(TOKEN_KINDS))
    return figure_svg(fig, "tokens")


# ---------------------------------------------------------------- html

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


def tokens_text(usage: Usage) -> str:
    return (
        f"in {usage.tokens_in:,} (input {usage.input_tokens:,}, cache read {usage.cache_read_tokens:,}, "
        f"cache write {usage.cache_write_tokens:,}) · out {usage.output_tokens:,} "
        f"(thinking {usage.thinking_tokens:,}) · total {usage.total:,}"
    )


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
        ("tokens", scripted if run.scripted else esc(tokens_text(run.usage))),
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
        parts.append("<h3>Correctness per case</h3>")
        rows = [
            [
                esc(c.name),
                esc(" ".join(f"{k}={v}" for k, v in c.sizes.items())),
                status_span(c.status),
                fmt_err(c.max_abs_err),
                fmt_err(c.rel_l2_err),
                esc(c.message),
            ]
            for c in bench.cases
        ]
        parts.append(
            table_html(["case", "sizes", "status", "max abs err", "rel L2 err", "message"], rows, [3, 4])
        )
        parts.append("<h3>Timing per shape</h3>")
        rows = [
            [
                esc(t.name + (" (primary)" if t.primary else "")),
                fmt_ms(t.candidate.median_ms if t.candidate else None),
                f"{t.candidate.rse:.1%}" if t.candidate else "–",
                fmt_ms(t.reference.median_ms if t.reference else None),
                esc(fmt_speedup(t.speedup)),
            ]
            for t in bench.timings
        ]
        parts.append(table_html(["shape", "candidate", "rse", "reference", "speedup"], rows, [1, 2, 3, 4]))
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
