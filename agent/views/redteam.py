"""The red team's summary (`agent redteam`, and `agent show` of a red-team run): each candidate's attack,
its verdict at first judgement, its verdict after re-judging, and whether it was caught. A pure function of
the run's `RejudgeEvent`s."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from agent.runlog.events import RejudgeEvent
from agent.views.fmt import fmt_count, fmt_speedup

OUTCOME_STYLE = {
    "caught": "green",
    "caught on re-judge": "yellow",
    "escaped": "bold red",
    "harness error": "red",
}


def verdict_text(status: str | None, flags: list[str], speedup: float | None = None) -> str:
    if status is None:
        return "–"
    shown = f"{status} {fmt_speedup(speedup)}" if status == "ok" and speedup is not None else status
    return f"{shown} [{', '.join(flags)}]" if flags else shown


def summary_line(events: list[RejudgeEvent]) -> str:
    counts = {o: sum(1 for e in events if e.outcome == o) for o in OUTCOME_STYLE}
    cases = sum(1 for e in events if e.case_dir)
    errors = counts["harness error"]
    failed = f", {errors} harness error{'' if errors == 1 else 's'}" if errors else ""
    return (
        f"{fmt_count(len(events), 'candidate')}: {counts['caught']} caught, {counts['caught on re-judge']} caught on "
        f"re-judge, {counts['escaped']} escaped{failed} · {cases} regression case{'' if cases == 1 else 's'} "
        "written"
    )


def redteam_table(events: list[RejudgeEvent]) -> Table:
    table = Table(header_style="bold", box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("kernel", "attack", "first verdict", "after re-judge", "result"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(
            Text(e.kernel_path),  # Text, never markup: a flag list is in brackets
            Text(e.attack),
            Text(verdict_text(e.first_status, e.first_flags, e.first_speedup)),
            Text(verdict_text(e.strict_status, e.strict_flags)),
            Text(e.outcome, style=OUTCOME_STYLE[e.outcome]),
        )
    return table


def redteam_summary(events: list[RejudgeEvent]) -> RenderableType:
    """The whole summary: the table, what caught each, the cases written and how to promote them."""
    parts: list[RenderableType] = [
        Rule("red team", align="left"),
        redteam_table(events),
        Text(summary_line(events)),
    ]
    for e in events:
        if e.caught_by:
            parts.append(Text(f"{e.kernel_path} {e.attack}: {e.caught_by}", style="dim"))
    for e in events:
        if e.case_dir:
            parts.append(
                Text(f"regression case {e.case_dir}: agent redteam promote RUN/{Path(e.case_dir).name}")
            )
    return Group(*parts)
