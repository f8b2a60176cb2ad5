"""Numbers, times and small layout pieces shared by every view (terminal and HTML): one way to write a
speedup, a duration, a token count."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from agent.runlog.events import TimedKernel, Usage
from tools.figure_data import EAGER_LABEL, HEADLINE_LABELS

SCRIPTED_LABEL = "scripted playback"
OK_STYLE, BAD_STYLE, LABEL_STYLE, DIM = "green", "red", "bold cyan", "dim"


def fmt_headline(best: TimedKernel | None, speedup: float | None) -> str:
    """A best kernel's headline, named as everywhere (docs/ranking.md): `41% of floor` where it ranks by the
    floor, else `3.10× (launch-free ref)`; an older log's best: its speedup alone."""
    if best is not None and best.headline_metric == "floor_fraction" and best.headline is not None:
        return f"{best.headline * 100:.0f}% of floor"
    if speedup is None:
        return "–"
    return (
        f"{fmt_speedup(speedup)} (launch-free ref)"
        if best is not None and best.headline_metric
        else fmt_speedup(speedup)
    )


def fmt_fraction(fraction: float | None) -> str:
    """A share of the floor: `41%` (`–`: no floor)."""
    return "–" if fraction is None else f"{fraction * 100:.0f}%"


def fmt_figures(best: TimedKernel | None, speedup: float | None) -> str:
    """The headline, then the launch-free speedup (where the floor leads) and the eager speedup, labelled."""
    parts = [fmt_headline(best, speedup)]
    if best is not None and best.headline_metric == "floor_fraction":
        parts.append(f"{HEADLINE_LABELS['launch_free_speedup']} {fmt_speedup(speedup)}")
    if best is not None and best.eager_speedup is not None:
        parts.append(f"{EAGER_LABEL} {fmt_speedup(best.eager_speedup)}")
    return " · ".join(parts)


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f}s"


def fmt_duration(seconds: float | None) -> str:
    """Wall times for tables: 42.0s, 6m 06s, 1h 02m."""
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def fmt_speedup(speedup: float | None) -> str:
    if speedup is None:
        return "–"
    if speedup >= 100:
        return f"{speedup:.0f}×"
    if speedup >= 10:
        return f"{speedup:.1f}×"
    return f"{speedup:.2f}×"


def fmt_count(n: int, noun: str) -> str:
    """`1 turn`, `4 turns`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_cost(dollars: float) -> str:
    return f"${dollars:.2f}" if dollars >= 1 else f"${dollars:.3f}"


def fmt_ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.3f} ms"


def fmt_err(value: float | None) -> str:
    return "–" if value is None else f"{value:.2g}"


def fmt_pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "–"


def fmt_time(stamp: str) -> str:
    try:
        return datetime.fromisoformat(stamp).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    except ValueError:
        return stamp


def tokens_line(usage: Usage) -> str:
    return f"tokens in={usage.tokens_in:,} · out={usage.output_tokens:,} · total={usage.total:,}"


def tokens_by_kind(usage: Usage) -> str:
    return (
        f"in={usage.tokens_in:,} (input {usage.input_tokens:,} · cache read {usage.cache_read_tokens:,} · "
        f"cache write {usage.cache_write_tokens:,}) · out={usage.output_tokens:,} "
        f"(thinking {usage.thinking_tokens:,}) · total={usage.total:,}"
    )


def indent(renderable: RenderableType) -> Padding:
    return Padding(renderable, (0, 0, 0, 2))


def labelled(label: str, body: RenderableType, style: str = LABEL_STYLE) -> Group:
    return Group(Text(label, style=style), indent(body))


def grid(rows: Iterable[tuple[str, RenderableType]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style=LABEL_STYLE, no_wrap=True)
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    return table
