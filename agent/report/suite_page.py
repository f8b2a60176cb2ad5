"""`agent suite`'s HTML page (`suite.html` in the suite folder): the summary, then one row per problem,
in `agent report`'s style (agent/report/assets.py). Everything from a log is escaped; no script."""

from __future__ import annotations

import html
from pathlib import Path

from agent.report.assets import CSS
from agent.suite.records import ProblemResult, SuiteData
from agent.views.fmt import fmt_cost, fmt_duration, fmt_fraction, fmt_speedup
from agent.views.suite import COLUMNS, RIGHT, fmt_p

HEADERS = (*COLUMNS[:-1], "run or kernel")  # the terminal's columns (agent/views/suite.py)
NUMERIC = RIGHT


def esc(value: object) -> str:
    return html.escape(str(value))


def summary_rows(data: SuiteData) -> list[tuple[str, str]]:
    s, config = data.summary, data.config
    total = s.problems

    def share(count: int) -> str:
        return f"{count}/{total} ({count / total:.0%})" if total else "0/0"

    what = f"kernels from {config.kernels_dir}" if config.mode == "kernels" else (config.model or "default")
    return [
        ("suite", data.suite_dir),
        ("judged", what),
        ("correct", share(s.correct)),
        *((f"fast_{fmt_p(f.p)}", share(f.count)) for f in s.fast_p if f.p > 0),
        (
            "geomean speedup (launch-free ref)",
            f"{fmt_speedup(s.geomean_speedup)} over {s.correct} correct (ratios clipped)",
        ),
        ("geomean eager speedup", fmt_speedup(s.geomean_eager_speedup)),
        ("mean % of floor", fmt_fraction(s.mean_floor_fraction)),
        ("tokens", f"{s.tokens:,} (in {s.usage.tokens_in:,}, out {s.usage.output_tokens:,})"),
        ("cost", fmt_cost(s.cost_usd)),
        ("time", f"{fmt_duration(s.wall_seconds)} of runs"),
        ("not ended", ", ".join(data.pending) or "none"),
        ("harness errors", str(s.harness_errors)),
    ]


def result_cells(result: ProblemResult) -> list[str]:
    status = "ok" if result.correct else "bad" if result.outcome != "ended" else ""
    return [
        esc(result.problem),
        esc(result.device),
        f'<span class="{status}" title="{esc(result.message)}">{esc(result.exit_status)}</span>',
        esc(result.exit_code),
        esc(fmt_speedup(result.best_speedup)),
        esc(fmt_fraction(result.best_floor_fraction)),
        esc(fmt_speedup(result.best_eager_speedup)),
        esc(result.turns),
        esc(f"{result.usage.total:,}"),
        esc(fmt_cost(result.cost_usd)),
        esc(fmt_duration(result.wall_seconds)),
        where(result),
    ]


def where(result: ProblemResult) -> str:
    """The run folder, linked to its report (written beside suite.html's runs), or the kernel judged."""
    if result.run_dir:
        return f'<a href="{esc(result.run_dir)}/report.html">{esc(result.run_dir)}</a>'
    return esc(result.best_kernel or "–")


def problems_html(data: SuiteData) -> str:
    head = "".join(f'<th class="num">{h}</th>' if h in NUMERIC else f"<th>{h}</th>" for h in HEADERS)
    rows = []
    for result in data.results:
        cells = result_cells(result)
        rows.append(
            "<tr>"
            + "".join(
                f'<td class="num">{c}</td>' if h in NUMERIC else f"<td>{c}</td>"
                for h, c in zip(HEADERS, cells, strict=True)
            )
            + "</tr>"
        )
    ran = {r.problem for r in data.results}
    rows += [
        f'<tr><td>{esc(n)}</td><td></td><td class="dim">not run</td></tr>'
        for n in data.pending
        if n not in ran
    ]
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def build_suite_page(data: SuiteData) -> str:
    summary = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in summary_rows(data))
    title = Path(data.suite_dir).name
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · kernel-agent suite</title><style>{CSS}</style></head>\n<body>\n"
        f'<header><h1>{esc(title)}</h1><p class="sub">{len(data.config.problems)} problems · started '
        f"{esc(data.config.started_at)}</p>"
        f'<table class="kv">{summary}</table></header>\n'
        f'<div class="layout"><main><h2>Problems</h2>{problems_html(data)}'
        '<p class="note">fast_p: the share of the suite\'s problems whose best kernel is correct and more '
        "than p times as fast as the launch-free reference (docs/ranking.md); problems not ended count as not "
        "correct.</p>"
        "</main></div>\n</body></html>\n"
    )


def write_suite_page(data: SuiteData, out: Path) -> Path:
    out.write_text(build_suite_page(data), encoding="utf-8")
    return out
