"""The charts of `agent report`, drawn with matplotlib (imported inside, so `agent show` stays light) as
inline SVG. Every plotted artist carries an SVG id (`gid`) naming what it shows — `speedup-ok`,
`best-so-far`, `llm-seconds-3`, `tokens-output-2` — so the figures can be read back from the page."""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent import toolbox
from agent.runlog.data import RunData
from agent.runlog.events import ToolCallEvent
from agent.views.fmt import fmt_speedup
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


def kernel_name(point: BenchPoint) -> str:
    return point.kernel_path.rsplit("/", 1)[-1]


def measured_best(points: list[BenchPoint]) -> BenchPoint | None:
    """The fastest correct benchmark of the run, as measured when it ran (where the line ends)."""
    correct = [p for p in points if p.speedup is not None]
    return max(correct, key=lambda p: p.speedup or 0.0) if correct else None


def recheck_note(run: RunData) -> str | None:
    """Why the final best is not where the best-so-far line ends, when it is not: the line is what each
    benchmark measured during the run; the final best is the fastest kernel of the re-check at the end."""
    final = run.best if run.best and run.best.final else None
    line_end = measured_best(bench_points(run))
    if final is None or line_end is None:
        return None
    same = final.kernel_path == line_end.kernel_path and fmt_speedup(final.speedup) == fmt_speedup(
        line_end.speedup
    )
    if same:
        return None
    return (
        f"The best-so-far line is what each benchmark measured during the run; it ends at "
        f"{fmt_speedup(line_end.speedup)} ({line_end.kernel_path}, turn {line_end.turn}). At the end the leading "
        f"kernels were benchmarked again with fresh seeds and twice the repetitions (the stars); the "
        f"fastest that stayed correct is the final best: {final.kernel_path} at {fmt_speedup(final.speedup)}."
    )


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


def new_figure(height: float = 3.2, width: float = 9.0) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(width, height), layout="constrained")
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
    ax.set_ylabel("speedup (launch-free ref) (×)")
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
            ax, final, "*", [f"{kernel_name(c)} re-check {fmt_speedup(c.speedup)}" for c in final],
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
    """A stacked bar per turn, the legend above (half the page wide: the time and tokens charts pair up)."""
    fig, ax = new_figure(height=3.4, width=6.0)
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


TRAJECTORY_COLORS = ["#1b4f72", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]


@dataclass(frozen=True)
class ShapePoint:
    """One correct benchmark's timing of one shape."""

    trajectory: int | None
    turn: int
    median_ms: float
    rse: float
    speedup: float | None


def shape_points(run: RunData) -> dict[str, list[ShapePoint]]:
    """Every correct benchmark's timing, by shape name (in the order the shapes were first timed)."""
    found: dict[str, list[ShapePoint]] = {}
    for event in run.events:
        if not (isinstance(event, ToolCallEvent) and event.name == "benchmark"):
            continue
        bench = toolbox.parse_result(event)
        if not (isinstance(bench, BenchResult) and bench.correct):
            continue
        for timing in bench.timings:
            if timing.candidate is not None:
                point = ShapePoint(
                    event.trajectory,
                    event.turn,
                    timing.candidate.median_ms,
                    timing.candidate.rse,
                    timing.speedup,
                )
                found.setdefault(timing.name + (" *" if timing.primary else ""), []).append(point)
    return found


def reference_ms(run: RunData, shape: str) -> float | None:
    """The reference's median at a shape (the last benchmark that timed it)."""
    name = shape.removesuffix(" *")
    medians = [
        t.reference.median_ms
        for e in run.events
        if isinstance(e, ToolCallEvent) and e.name == "benchmark"
        for b in [toolbox.parse_result(e)]
        if isinstance(b, BenchResult)
        for t in b.timings
        if t.name == name and t.reference is not None
    ]
    return medians[-1] if medians else None


def shape_chart(run: RunData, index: int, shape: str, points: list[ShapePoint]) -> str:
    """One shape's candidate median over the turns (error bars: ± one standard error), a line per
    trajectory; the title names the reference's median."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4.4, 2.7), layout="constrained")
    ax = fig.add_subplot()
    ax.set_gid(f"shape-{index}-chart")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    reference = reference_ms(run, shape)
    name = shape if len(shape) <= 48 else shape[:47] + "…"  # a name from the log: never the layout's master
    title = name + (f" · reference {reference:.3f} ms" if reference is not None else "")
    ax.set_title(title, fontsize=9, loc="left", parse_math=False)
    ax.set_xlabel("turn", fontsize=8)
    ax.set_ylabel("candidate median (ms)", fontsize=8)
    ax.tick_params(labelsize=8)
    lanes = sorted({p.trajectory for p in points}, key=lambda t: t or 0)
    for lane in lanes:
        mine = sorted((p for p in points if p.trajectory == lane), key=lambda p: p.turn)
        color = TRAJECTORY_COLORS[((lane or 1) - 1) % len(TRAJECTORY_COLORS)]
        bars = ax.errorbar(
            [p.turn for p in mine], [p.median_ms for p in mine], yerr=[p.median_ms * p.rse for p in mine],
            marker="o", markersize=4, linewidth=1.3, capsize=2, color=color,
            label=f"trajectory {lane}" if lane is not None else None,
        )  # fmt: skip
        bars.lines[0].set_gid(f"shape-{index}-ms-{lane or 0}")  # the line and its markers, not the bars
        last = mine[-1]
        ax.annotate(
            fmt_speedup(last.speedup), (last.turn, last.median_ms), textcoords="offset points", xytext=(5, 4),
            fontsize=8, color=color, annotation_clip=False,
        )  # fmt: skip
    ax.set_xlim(0.5, max(p.turn for p in points) + 0.9)  # room for the last speedup's note
    ax.set_ylim(0, 1.2 * max(p.median_ms * (1 + p.rse) for p in points))
    if any(lane is not None for lane in lanes):
        ax.legend(fontsize=7, frameon=False)
    return figure_svg(fig, f"shape-{index}")


def shape_charts(run: RunData) -> list[str]:
    """A small chart per timed shape (the primary one starred)."""
    return [shape_chart(run, i, shape, points) for i, (shape, points) in enumerate(shape_points(run).items())]
