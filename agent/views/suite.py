"""`agent suite`'s views, pure functions of a suite's data (agent.suite.records.SuiteData): one table row
per problem, then the summary lines (correct rate, fast_p, geomean, tokens, cost); `suite_json` is
`--json`'s one object."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agent.suite.records import ProblemResult, SuiteData, SuiteSummary
from agent.views.fmt import BAD_STYLE, DIM, OK_STYLE, fmt_cost, fmt_duration, fmt_fraction, fmt_speedup
from tools.figure_data import EAGER_LABEL

# the best kernel's figures, named as everywhere (tools/figure_data.py): its launch-free speedup (what fast_p
# and the geomean count), its % of floor, its eager speedup
COLUMNS = ("problem", "device", "status", "exit", "speedup (launch-free ref)", "% of floor", EAGER_LABEL, "turns",
           "tokens", "cost", "time", "run")  # fmt: skip
RIGHT = {"exit", "speedup (launch-free ref)", "% of floor", EAGER_LABEL, "turns", "tokens", "cost", "time"}


def fmt_p(p: float) -> str:
    return f"{p:g}"


def status_cell(result: ProblemResult) -> Text:
    style = OK_STYLE if result.correct else BAD_STYLE if result.outcome != "ended" else ""
    return Text(result.exit_status, style=style)


def result_row(result: ProblemResult) -> list[RenderableType]:
    where = result.run_dir or result.best_kernel or "–"
    return [
        result.problem,
        result.device,
        status_cell(result),
        str(result.exit_code),
        fmt_speedup(result.best_speedup),
        fmt_fraction(result.best_floor_fraction),
        fmt_speedup(result.best_eager_speedup),
        str(result.turns),
        f"{result.usage.total:,}",
        fmt_cost(result.cost_usd),
        fmt_duration(result.wall_seconds),
        where,
    ]


def problems_table(data: SuiteData) -> Table:
    table = Table(header_style="bold", box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in RIGHT else "left", no_wrap=column != "run")
    for result in data.results:
        table.add_row(*result_row(result))
    ran = {r.problem for r in data.results}
    for name in (n for n in data.pending if n not in ran):
        table.add_row(name, "", Text("not run", style=DIM), "", "–", "–", "–", "", "", "", "", "")
    return table


def fraction(count: int, total: int) -> str:
    return f"{count}/{total} ({count / total:.0%})" if total else "0/0"


def summary_lines(summary: SuiteSummary) -> Text:
    fast = " · ".join(
        f"fast_{fmt_p(f.p)} {fraction(f.count, summary.problems)}" for f in summary.fast_p if f.p > 0
    )
    geomean = (
        f"geomean speedup (launch-free ref) {fmt_speedup(summary.geomean_speedup)} over {summary.correct} correct"
        f" ({EAGER_LABEL} {fmt_speedup(summary.geomean_eager_speedup)})"
        if summary.geomean_speedup is not None
        else "geomean – (no correct kernel)"
    )
    if summary.mean_floor_fraction is not None:
        geomean += f" · mean % of floor {fmt_fraction(summary.mean_floor_fraction)}"
    spend = f"{summary.tokens:,} tokens, {fmt_cost(summary.cost_usd)}"
    lines = [
        f"correct {fraction(summary.correct, summary.problems)} · {fast}",
        f"{geomean} · {spend} · {fmt_duration(summary.wall_seconds)} of runs",
    ]
    if summary.ended < summary.problems:
        lines.append(
            f"{summary.problems - summary.ended} problem(s) not ended: agent suite --resume runs them"
        )
    if summary.harness_errors:
        lines.append(f"{summary.harness_errors} harness error(s)")
    return Text("\n".join(lines))


def suite_view(data: SuiteData) -> RenderableType:
    """The table of problems, then the summary."""
    return Group(problems_table(data), Text(""), summary_lines(data.summary))


def suite_json(data: SuiteData, exit_code: int, page: str | None) -> dict[str, Any]:
    """`agent suite --json`: the folder, the exit code, the summary, the config and every result."""
    return {
        "suite_dir": data.suite_dir,
        "exit_code": exit_code,
        "page": page,
        "summary": data.summary.model_dump(mode="json"),
        "config": data.config.model_dump(mode="json"),
        "problems": [r.model_dump(mode="json") for r in data.results],
        "pending": data.pending,
    }
