"""The turns of `agent report`'s page: each turn whole (reasoning, text, calls, verdicts with every case and
timing, the kernel's diff against the one before it and against the best), the navigation, and a parallel
run's trajectories side by side. Everything the log holds is untrusted text: it reaches the page only
through `esc` (or pygments, which escapes), never as markup or script."""

from __future__ import annotations

import difflib
import html
import json
from collections.abc import Iterable
from dataclasses import dataclass

from agent import toolbox
from agent.runlog.data import RunData, TrajectoryData, TurnData
from agent.runlog.events import BestEvent, ErrorEvent, ModelCallEvent, ToolCallEvent
from agent.views.fmt import (
    SCRIPTED_LABEL,
    fmt_err,
    fmt_figures,
    fmt_ms,
    fmt_seconds,
    fmt_speedup,
    tokens_line,
)
from agent.views.result import CASE_COLUMNS, TIMING_COLUMNS, headline_text, sizes_text, timing_row, usage_text
from tools.benchmark import sanitizer_text
from tools.figures import figures_of
from tools.floor import floor_text
from tools.profile_kernel import text as profile_text
from tools.profile_results import ProfileResult
from tools.results import BenchResult, CompileResult

OK_STATUSES = ("ok", "passed")


def esc(value: object) -> str:
    return html.escape(str(value))


def status_span(status: str) -> str:
    return f'<span class="{"ok" if status in OK_STATUSES else "bad"}">{esc(status)}</span>'


def table_html(headers: Iterable[str], rows: list[list[str]], numeric: Iterable[int] = ()) -> str:
    """A table of already-escaped cells."""
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


def highlighted(source: str) -> str:
    """Python source as HTML (pygments, which rich already depends on), styled by `source_css`."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return f'<div class="source">{highlight(source, PythonLexer(), HtmlFormatter(linenos="inline"))}</div>'


def source_css() -> str:
    from pygments.formatters import HtmlFormatter

    return str(HtmlFormatter().get_style_defs(".source"))


# ---------------------------------------------------------------- where each turn and kernel sits


def turn_id(turn: TurnData) -> str:
    """The turn's anchor: turn-3, turn-t2-3 in a parallel run (a run-level turn keeps turn-N)."""
    return f"turn-{turn.turn}" if turn.trajectory is None else f"turn-t{turn.trajectory}-{turn.turn}"


def turn_label(turn: TurnData, parallel: bool) -> str:
    if turn.trajectory is not None:
        return f"trajectory {turn.trajectory} · turn {turn.turn}"
    return "final re-check" if parallel else f"turn {turn.turn}"


@dataclass(frozen=True)
class Lineage:
    """Which kernel each kernel is diffed against (the one before it in its trajectory; a branch's first
    against the kernel it started from), where each was first run, and the best."""

    previous: dict[str, str | None]
    first_turn: dict[str, tuple[str, str]]
    """kernel path → (the anchor, the label) of the turn that first ran it"""
    best_path: str | None
    best_turn: str | None

    def best_source(self, run: RunData) -> str | None:
        return run.kernels.get(self.best_path) if self.best_path else None


def lineage(run: RunData) -> Lineage:
    starts = {t.number: t.from_kernel for t in run.trajectories}
    last: dict[int | None, str | None] = {}
    previous: dict[str, str | None] = {}
    first_turn: dict[str, tuple[str, str]] = {}
    for turn in run.turns:
        for call in turn.tool_calls:
            path = call.kernel_path
            if not path or path in first_turn:
                continue
            first_turn[path] = (turn_id(turn), turn_label(turn, run.parallel))
            previous[path] = last.get(turn.trajectory, starts.get(turn.trajectory or 0))
            last[turn.trajectory] = path
    best_path = run.best_kernel_path
    best_turn = first_turn[best_path][0] if best_path in first_turn else None
    return Lineage(previous, first_turn, best_path, best_turn)


def turn_speedup(turn: TurnData) -> float | None:
    """The best correct speedup of the turn's benchmarks."""
    found = [toolbox.parse_result(c) for c in turn.tool_calls if c.name == "benchmark"]
    speedups = [r.speedup for r in found if isinstance(r, BenchResult) and r.correct and r.speedup]
    return max(speedups, default=None)


def turn_outcome(turn: TurnData) -> str:
    """A few words for the navigation: the speedup, else the last call's status, else what happened."""
    speedup = turn_speedup(turn)
    if speedup is not None:
        return fmt_speedup(speedup)
    if turn.tool_calls:
        return turn.tool_calls[-1].status
    winner = next((e for e in turn.events if isinstance(e, BestEvent)), None)
    if winner is not None:
        return f"{'re-check winner' if winner.final else 'best'} {fmt_speedup(winner.speedup)}"
    if turn.unanswered:
        return "no result"
    return "text" if turn.complete else "incomplete"


# ---------------------------------------------------------------- a kernel's diffs


def diff_lines(old: str, new: str, old_name: str, new_name: str) -> list[str]:
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm=""))


def diff_html(old: str, new: str, old_name: str, new_name: str, against: str, is_open: bool) -> str:
    """A unified diff, folded in a <details> whose summary counts the lines added and removed."""
    lines = diff_lines(old, new, old_name, new_name)
    if not lines:
        return f'<p class="dim">the same code as {esc(against)}: {esc(old_name)} and {esc(new_name)}</p>'
    added = sum(1 for line in lines[2:] if line.startswith("+"))
    removed = sum(1 for line in lines[2:] if line.startswith("-"))
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    body = "".join(
        f'<span class="{"hunk" if i < 2 else kinds.get(line[:1], "ctx")}">{esc(line)}\n</span>'
        for i, line in enumerate(lines)
    )
    return (
        f'<details class="diff" data-against="{esc(against)}"{" open" if is_open else ""}><summary>'
        f"diff against {esc(against)}: {esc(old_name)} → {esc(new_name)} · "
        f'<span class="ok">+{added}</span> <span class="bad">−{removed}</span></summary>'
        f'<pre class="diff">{body}</pre></details>'
    )


def kernel_html(run: RunData, call: ToolCallEvent, where: str, family: Lineage) -> str:
    """A call's kernel: a link to where it first ran, or (a new kernel) its diffs and its source."""
    path = call.kernel_path
    if not path:
        return ""
    source = run.kernels.get(path)
    if source is None:
        return f'<p class="warn">{esc(path)}: not in the run directory</p>'
    anchor, label = family.first_turn.get(path, (where, ""))
    if anchor != where:
        return f'<p class="dim">{esc(path)}, first run in <a href="#{anchor}">{esc(label)}</a></p>'
    parts = []
    before = family.previous.get(path)
    if before and before in run.kernels:
        parts.append(diff_html(run.kernels[before], source, before, path, "the previous kernel", True))
    elif before:
        parts.append(f'<p class="warn">{esc(before)}, the kernel before it: not in the run directory</p>')
    else:
        parts.append('<p class="dim">the first kernel of its trajectory: nothing to diff against</p>')
    best = family.best_source(run)
    if family.best_path == path:
        parts.append('<p><span class="badge best">best kernel</span></p>')
    elif best is not None and family.best_path is not None and family.best_path != before:
        parts.append(diff_html(source, best, path, family.best_path, "the best", False))
    lines = len(source.splitlines())
    parts.append(
        f'<details class="kernel"><summary>source of {esc(path)} ({lines} lines)</summary>'
        f"{highlighted(source)}</details>"
    )
    return "".join(parts)


# ---------------------------------------------------------------- verdicts


def compile_html(result: CompileResult, kernel_path: str | None) -> str:
    cached = " (cached)" if result.cached else ""
    if result.ok:
        parts = [
            f'<p class="verdict"><span class="ok">compiled in {fmt_seconds(result.seconds)}{cached}</span>'
        ]
    else:
        parts = [f'<p class="verdict"><span class="bad">{esc(result.status)}</span>']
    parts.append(f": {esc(result.message)}</p>")
    for diag in result.errors:
        if diag.candidate_line is not None:
            where = f"{kernel_path or 'kernel'}:{diag.candidate_line}"
        else:
            where = f"{diag.generated_file or 'generated'}:{diag.generated_line or '?'}"
        line = f"\n    {diag.source_line}" if diag.source_line else ""
        parts.append(
            f"<pre><b>{esc(where)}</b>: <span class='bad'>error: {esc(diag.message)}</span>{esc(line)}</pre>"
        )
    if result.kernels:
        rows = [
            [esc(k.name), esc(k.registers if k.registers is not None else "?"),
             esc((k.spill_stores or 0) + (k.spill_loads or 0)), esc(k.stack_bytes or 0), esc(k.shared_bytes or 0)]
            for k in result.kernels
        ]  # fmt: skip
        parts.append(table_html(["kernel", "registers", "spill B", "stack B", "smem B"], rows, [1, 2, 3, 4]))
    if result.output.strip():
        parts.append(f"<details><summary>build output</summary><pre>{esc(result.output)}</pre></details>")
    return "".join(parts)


def cases_html(result: BenchResult) -> str:
    rows = [
        [esc(c.name), esc(sizes_text(c.sizes, short=True)), status_span(c.status), esc(fmt_err(c.max_abs_err)),
         esc(fmt_err(c.rel_l2_err)), esc("–" if c.seconds is None else fmt_seconds(c.seconds)), esc(c.message)]
        for c in result.cases
    ]  # fmt: skip
    columns = [*CASE_COLUMNS[:5], "seconds", CASE_COLUMNS[5]]
    return table_html(columns, rows, numeric=[3, 4, 5])


def bench_html(result: BenchResult, kernel_path: str | None) -> str:
    """The verdict, every case, every timed shape, the device-time split, the phases' seconds."""
    primary = result.primary_timing
    if result.correct and result.speedup is not None:
        detail = ""
        if primary and primary.candidate and primary.reference:
            detail = (
                f' <span class="dim">({esc(primary.name)}: {fmt_ms(primary.candidate.median_ms)}, eager reference '
                f"{fmt_ms(primary.reference.median_ms)}, rse {primary.candidate.rse:.1%})</span>"
            )
        headline = esc(headline_text(result.figures or figures_of(result)))
        parts = [f'<p class="verdict"><span class="ok">correct · {headline}</span>{detail}</p>']
    else:
        parts = [
            f'<p class="verdict"><span class="bad">{esc(result.status)}</span>: {esc(result.message)}</p>'
        ]
    if result.compile and not result.compile.ok:
        parts.append(compile_html(result.compile, kernel_path))
    for flag in result.flag_details:
        style = "bad" if flag.disqualifying else "warn"
        parts.append(f'<p class="{style}">flag {esc(flag.name)}: {esc(flag.message)}</p>')
    if result.sanitizer is not None:
        style = {"clean": "ok", "flagged": "bad"}.get(result.sanitizer.status, "warn")
        parts.append(f'<p class="{style}">{esc(sanitizer_text(result.sanitizer))}</p>')
    if result.cases:
        passed = sum(c.status == "passed" for c in result.cases)
        style = "ok" if passed == len(result.cases) else "bad"
        parts.append(f'<p class="{style}">{passed}/{len(result.cases)} correctness cases passed</p>')
        parts.append(cases_html(result))
    if result.timings:
        rows = [[esc(cell) for cell in timing_row(t)] for t in result.timings]
        parts.append(table_html(TIMING_COLUMNS, rows, numeric=[1, 2, 3, 4, 5, 6, 7]))
        floors = "; ".join(f"{t.name}: {floor_text(t)}" for t in result.timings if floor_text(t))
        parts += [f'<p class="dim">speed-of-light {esc(floors)}</p>'] if floors else []
    usage = result.usage
    if usage and usage.own_share is not None:
        parts.append(f'<p class="dim">{esc(usage_text(usage))}</p>')
    if result.phases:
        phases = " · ".join(f"{name} {fmt_seconds(s)}" for name, s in result.phases.items())
        parts.append(f'<p class="dim">{esc(fmt_seconds(result.seconds))} evaluating: {esc(phases)}</p>')
    parts += [f'<p class="dim">{esc(notice)}</p>' for notice in result.notices]
    if result.output.strip():
        parts.append(f"<details><summary>candidate output</summary><pre>{esc(result.output)}</pre></details>")
    return "".join(parts)


def call_html(run: RunData, call: ToolCallEvent, where: str, family: Lineage) -> str:
    result = toolbox.parse_result(call)
    good = call.status == "ok" and not call.is_error
    head = (
        f"<h4>call → {esc(call.name)} {esc(call.kernel_path or '')}"
        f'<span class="badge {"ok" if good else "bad"}">{esc(call.status)}</span>'
        f' <span class="dim">{fmt_seconds(call.seconds)}</span></h4>'
    )
    parts = [head]
    extra = {k: v for k, v in call.arguments.items() if k not in ("kernel_path", "kernel_code")}
    if extra:
        parts.append(f"<pre>{esc(json.dumps(extra, sort_keys=True))}</pre>")
    if isinstance(result, BenchResult):
        parts.append(bench_html(result, call.kernel_path))
    elif isinstance(result, CompileResult):
        parts.append(compile_html(result, call.kernel_path))
    elif isinstance(result, ProfileResult):
        parts.append(f"<pre>{esc(profile_text(result))}</pre>")
    else:
        parts.append('<p class="warn">no readable result in the log</p>')
    parts.append(
        f"<details><summary>what the model was told</summary><pre>{esc(call.summary or '(nothing)')}</pre></details>"
    )
    parts.append(kernel_html(run, call, where, family))
    return f'<div class="call">{"".join(parts)}</div>'


def model_call_html(call: ModelCallEvent) -> str:
    parts = []
    if call.status == "error":
        parts.append(f'<p class="bad">model call failed: {esc(call.error or "no message")}</p>')
    if call.reasoning:
        parts.append(
            f'<div class="label">reasoning</div><div class="prose reasoning">{esc(call.reasoning.strip())}</div>'
        )
    if call.text:
        parts.append(f'<div class="label">assistant</div><div class="prose">{esc(call.text.strip())}</div>')
    if call.status == "ok" and call.stop_reason not in ("tool_use", "end_turn", None):
        parts.append(f'<p class="warn">stop_reason: {esc(call.stop_reason)}</p>')
    return "".join(parts)


def best_event_html(event: BestEvent) -> str:
    label = "final re-check winner" if event.final else "new best"
    return (
        f'<p><span class="badge best">{label}</span> {esc(fmt_figures(event, event.speedup))} · {esc(event.kernel_path)} · '
        f"{fmt_ms(event.median_ms)} (rse {event.rse:.1%})</p>"
    )


def turn_header(run: RunData, turn: TurnData) -> str:
    parts = [f"{fmt_seconds(turn.turn_seconds)} turn" if turn.complete else "incomplete (no turn_end)"]
    parts += [f"{fmt_seconds(turn.llm_seconds)} LLM", f"{fmt_seconds(turn.tool_seconds)} tools"]
    parts.append(SCRIPTED_LABEL if run.scripted else tokens_line(turn.usage))
    if not run.scripted and turn.cost_usd:
        parts.append(f"${turn.cost_usd:.3f}")
    return " · ".join(parts)


def turn_html(run: RunData, turn: TurnData, family: Lineage) -> str:
    where = turn_id(turn)
    label = turn_label(turn, run.parallel)
    best = where == family.best_turn
    speedup = turn_speedup(turn)
    badges = f'<span class="badge ok">{fmt_speedup(speedup)}</span>' if speedup is not None else ""
    badges += '<span class="badge best">best</span>' if best else ""
    parts = [f'<h3>{esc(label)}{badges} <span class="dim">{esc(turn_header(run, turn))}</span></h3>']
    for event in turn.events:
        if isinstance(event, ModelCallEvent):
            parts.append(model_call_html(event))
        elif isinstance(event, ToolCallEvent):
            parts.append(call_html(run, event, where, family))
        elif isinstance(event, BestEvent):
            parts.append(best_event_html(event))
        elif isinstance(event, ErrorEvent):
            parts.append(f'<p class="bad">error in {esc(event.where)}: {esc(event.message)}</p>')
    parts += [f'<p class="bad">{esc(b.name)}: no result logged</p>' for b in turn.unanswered]
    attrs = f'id="{where}" data-turn="{turn.turn}" data-label="{esc(label)}"'
    if turn.trajectory is not None:
        attrs += f' data-trajectory="{turn.trajectory}"'
    if best:
        attrs += " data-best"
    return f'<section class="turn" {attrs}>{"".join(parts)}</section>'


def turns_html(run: RunData) -> str:
    """Every turn whole; a parallel run's grouped under their trajectory."""
    family = lineage(run)
    parts: list[str] = []
    group: int | None = None
    for turn in run.turns:
        if run.parallel and turn.trajectory != group:
            group = turn.trajectory
            parts.append(f"<h2>{'Trajectory ' + str(group) if group is not None else 'Final re-check'}</h2>")
        parts.append(turn_html(run, turn, family))
    return "\n".join(parts)


# ---------------------------------------------------------------- navigation and the side-by-side view


def nav_html(run: RunData) -> str:
    links = ["<h2>Turns</h2>"]
    group: int | None = None
    for turn in run.turns:
        if run.parallel and turn.trajectory != group:
            group = turn.trajectory
            links.append(
                f'<div class="group">{"trajectory " + str(group) if group else "after the trajectories"}</div>'
            )
        name = "final re-check" if run.parallel and turn.trajectory is None else f"turn {turn.turn}"
        links.append(f'<a href="#{turn_id(turn)}">{esc(name)} · {esc(turn_outcome(turn))}</a>')
    keys = (
        '<div class="keys"><kbd>j</kbd>/<kbd>k</kbd> next / previous turn<br><kbd>b</kbd> best kernel'
        + ("<br><kbd>t</kbd>/<kbd>T</kbd> other trajectory" if run.parallel else "")
        + "<br><kbd>d</kbd> diffs · <kbd>?</kbd> all keys</div>"
    )
    top = '<a href="#overview">overview</a><a href="#best-kernel">best kernel</a>'
    return f'<nav id="turn-nav">{top}{"".join(links)}{keys}</nav>'


def card_html(turn: TurnData) -> str:
    calls = ", ".join(
        f"{esc(c.name)} {esc((c.kernel_path or '').removeprefix('kernels/'))} {status_span(c.status)}"
        for c in turn.tool_calls
    )
    text = next((c.text.strip() for c in turn.model_calls if c.text.strip()), "")
    snippet = esc(text[:140] + ("…" if len(text) > 140 else ""))
    return (
        f'<a class="card" href="#{turn_id(turn)}"><b>turn {turn.turn}</b> · {esc(turn_outcome(turn))}'
        f'<br>{calls or "<span class=dim>no calls</span>"}<br><span class="dim">{snippet}</span></a>'
    )


def lane_head(trajectory: TrajectoryData) -> str:
    kind = f"branch of {trajectory.from_kernel}" if trajectory.kind == "branch" else trajectory.kind
    return (
        f'<div class="lane-head"><b>trajectory {trajectory.number}</b> · {esc(kind)} · '
        f"{len(trajectory.turns)} turns · best {esc(fmt_speedup(trajectory.best_speedup))} · "
        f"ended: {esc(trajectory.exit_status or 'still running, or killed')}</div>"
    )


def lanes_html(run: RunData) -> str:
    """A parallel run's trajectories side by side: a column each, a row per turn number."""
    trajectories = run.trajectories
    rows = max((t.turn for tr in trajectories for t in tr.turns), default=0)
    cells = [lane_head(t) for t in trajectories]
    for number in range(1, rows + 1):
        for trajectory in trajectories:
            turn = next((t for t in trajectory.turns if t.turn == number), None)
            cells.append(card_html(turn) if turn else '<div class="lane-empty">–</div>')
    final = [t for t in run.turns if t.trajectory is None]
    style = f"grid-template-columns: repeat({max(len(trajectories), 1)}, minmax(0, 1fr))"
    tail = "".join(
        f'<div style="grid-column: 1 / -1">{card_html(t).replace("<b>turn", "<b>final re-check · turn", 1)}</div>'
        for t in final
    )
    return f'<div class="lanes" style="{style}">{"".join(cells)}{tail}</div>'
