"""The charts of `agent report`, drawn with matplotlib (imported inside, so `agent show` stays light) as
inline SVG. Every plotted artist carries an SVG id (`gid`) naming what it shows — `speedup-ok`,
`best-so-far`, `llm-seconds-3`, `tokens-output-2` — so the figures can be read back from the page."""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent import toolbox
from agent.events import ToolCallEvent
from agent.fmt import fmt_speedup
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
class BenchPoint:
    """One benchmark on the speedup chart: its turn, kernel, status and speedup (None unless correct)."""

    turn: int
    kernel_path: str
    status: str
    speedup: float | None


def bench_points(run: RunData, tool: str = "benchmark") -> list[BenchPoint]:
    """Every call of `tool` (`benchmark`, or `final_recheck` for the end-of-run re-measurements)."""
    found: list[BenchPoint] = []
    for event in run.events:
        if isinstance(event, ToolCallEvent) and event.name == tool:
            bench = toolbox.parse_result(event)
            correct = isinstance(bench, BenchResult) and bench.correct
            speedup = bench.speedup if correct and isinstance(bench, BenchResult) else None
            found.append(BenchPoint(event.turn, event.kernel_path or "?", event.status, speedup))
    return found


def running_best(points: list[BenchPoint], last_turn: int) -> list[tuple[int, float]]:
    """(turn, best correct speedup up to that turn) from the first correct benchmark to `last_turn`."""
    line: list[tuple[int, float]] = []
    best: float | None = None
    for turn in range(1, last_turn + 1):
        for point in (p for p in points if p.turn == turn and p.speedup is not None):
            best = point.speedup if best is None else max(best, point.speedup or 0.0)
        if best is not None:
            line.append((turn, best))
    return line


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


def labelled_markers(
    ax: Axes, points: list[BenchPoint], marker: str, notes: list[str], note_style: dict[str, object],
    **style: object,
) -> None:  # fmt: skip
    """One marker per point at its speedup (0: none), each annotated with its note."""
    ys = [p.speedup or 0.0 for p in points]
    ax.plot([p.turn for p in points], ys, marker, **style)  # type: ignore[arg-type]
    for point, y, note in zip(points, ys, notes, strict=True):
        ax.annotate(note, (point.turn, y), textcoords="offset points", fontsize=8, **note_style)  # type: ignore[arg-type]


def speedup_chart(run: RunData) -> str:
    found = bench_points(run)
    fig, ax = new_figure()
    ax.set_gid("speedup-chart")
    ax.set_ylabel("speedup vs reference (×)")
    turns = max((t.turn for t in run.turns), default=0) if run.parallel else run.turn_count  # per trajectory
    last_turn = max(turns, max((c.turn for c in found), default=0), 1)
    ax.axhline(1.0, color="#999999", linestyle=":", linewidth=1, gid="reference-line", label="reference (1×)")
    ok = [c for c in found if c.speedup is not None]
    failed = [c for c in found if c.speedup is None]
    if ok:
        notes = [fmt_speedup(c.speedup) for c in ok]
        labelled_markers(
            ax, ok, "o", notes, {"xytext": (6, 4)}, color=OK_COLOR, gid="speedup-ok", label="correct"
        )
    if failed:
        labelled_markers(
            ax, failed, "x", [c.status for c in failed], {"xytext": (7, 3), "color": BAD_COLOR}, color=BAD_COLOR,
            markersize=8, mew=2, gid="speedup-failed", label="failed (no speedup)", clip_on=False,
        )  # fmt: skip
    line = running_best(found, last_turn)
    if line:
        ax.plot(
            [t for t, _ in line], [s for _, s in line], drawstyle="steps-post", color=BEST_COLOR, linewidth=1.5,
            gid="best-so-far", label="best so far",
        )  # fmt: skip
    final = [c for c in bench_points(run, "final_recheck") if c.speedup is not None]
    if final:
        labelled_markers(
            ax, final, "*", [f"re-check {fmt_speedup(c.speedup)}" for c in final],
            {"xytext": (-8, 8), "ha": "right"}, color=FINAL_COLOR, markersize=13, markeredgecolor="#7a5c00",
            gid="speedup-final", label="final re-check",
        )  # fmt: skip
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


def bar_positions(run: RunData) -> list[int]:
    """One bar per turn: at its number, or (a parallel run, whose trajectories share numbers) in log order."""
    return list(range(1, len(run.turns) + 1)) if run.parallel else [t.turn for t in run.turns]


def bars_chart(run: RunData, name: str, ylabel: str, layers: list[tuple[str, list[float], str, str]]) -> str:
    """A stacked bar per turn, the legend above."""
    fig, ax = new_figure()
    ax.set_gid(f"{name}-chart")
    ax.set_ylabel(ylabel)
    if name == "tokens":
        thousands(ax)
    numbers = bar_positions(run)
    stacked_bars(ax, numbers, layers)
    ax.set_xlim(0.4, max(numbers, default=1) + 0.6)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=len(layers), fontsize=8, frameon=False)
    return figure_svg(fig, name)


def time_chart(run: RunData) -> str:
    turns = run.turns
    layers = [
        ("llm-seconds", [t.llm_seconds for t in turns], LLM_COLOR, "LLM"),
        ("tool-seconds", [t.tool_seconds for t in turns], TOOL_COLOR, "tools"),
    ]
    return bars_chart(run, "time", "seconds", layers)


def tokens_chart(run: RunData) -> str:
    turns = run.turns
    layers = [
        (f"tokens-{kind}", [float(getattr(t.usage, field)) for t in turns], color, kind.replace("-", " "))
        for kind, field, color in TOKEN_KINDS
    ]
    return bars_chart(run, "tokens", "tokens", layers)
