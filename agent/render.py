"""Pure renderers for `agent show` and `agent ls`: run data in, rich renderables out.

Nothing here prints; the CLI owns the Console. The per-turn transcript follows the format users know:

    turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468
    reasoning / assistant / call → compile_kernel / result ← compile_kernel (ok)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from agent.events import (
    BestEvent,
    ErrorEvent,
    Event,
    ModelCallEvent,
    ToolCallEvent,
    Usage,
)
from agent.rundata import RunData, ToolUseBlock, TrajectoryData, TurnData
from agent.runread import RunListing
from tools.results import BenchResult, CaseResult, CompileResult, Diagnostic, ShapeTiming

SCRIPTED_LABEL = "scripted playback"
COLLAPSED_LINES = 8
"""Kernel lines shown by default (a window around the first compile error when there is one)."""

OK_STYLE, BAD_STYLE, LABEL_STYLE, DIM = "green", "red", "bold cyan", "dim"


@dataclass(frozen=True)
class ShowOptions:
    trajectory: int | None = None
    turn: int | None = None
    last: int | None = None
    full: bool = False
    code: bool = True


# ---------------------------------------------------------------- formatting


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


def model_label(run: RunData) -> str:
    return SCRIPTED_LABEL if run.scripted else f"{run.info.provider}/{run.info.model}"


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


# ---------------------------------------------------------------- one turn


def turn_header(turn: TurnData, scripted: bool) -> Text:
    """`turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468`."""
    parts = [f"{fmt_seconds(turn.turn_seconds)} turn" if turn.complete else "incomplete (no turn_end)"]
    parts += [f"{fmt_seconds(turn.llm_seconds)} LLM", f"{fmt_seconds(turn.tool_seconds)} tools"]
    parts.append(SCRIPTED_LABEL if scripted else tokens_line(turn.usage))
    return Text.assemble((turn_label(turn), "bold"), (" · " + " · ".join(parts), "bold dim"))


def turn_label(turn: TurnData) -> str:
    return (
        f"turn {turn.turn}" if turn.trajectory is None else f"trajectory {turn.trajectory} · turn {turn.turn}"
    )


def render_model_call(call: ModelCallEvent) -> Iterator[RenderableType]:
    if call.status == "error":
        yield Text(f"model call failed: {call.error or 'no message'}", style=BAD_STYLE)
    if call.reasoning:
        yield labelled("reasoning", Text(call.reasoning, style="italic dim"), style="bold magenta")
    if call.text:
        yield labelled("assistant", Text(call.text))


def first_error_line(call: ToolCallEvent) -> int | None:
    result = parse_result(call)
    compile_result = result.compile if isinstance(result, BenchResult) else result
    if not isinstance(compile_result, CompileResult):
        return None
    return next((d.candidate_line for d in compile_result.errors if d.candidate_line), None)


def code_window(source: str, focus: int | None, full: bool) -> tuple[int, int]:
    total = len(source.splitlines())
    if full or total <= COLLAPSED_LINES:
        return 1, total
    if focus is None:
        return 1, COLLAPSED_LINES
    start = max(1, min(focus - COLLAPSED_LINES // 2, total - COLLAPSED_LINES + 1))
    return start, start + COLLAPSED_LINES - 1


def first_changed_line(source: str, previous: str) -> int | None:
    """The first line of `source` that differs from `previous` (None when identical)."""
    for number, (new, old) in enumerate(
        zip(source.splitlines(), previous.splitlines(), strict=False), start=1
    ):
        if new != old:
            return number
    new_total, old_total = len(source.splitlines()), len(previous.splitlines())
    return old_total + 1 if new_total > old_total else None


def previous_kernels(run: RunData) -> dict[str, str]:
    """Each kernel path mapped to the candidate submitted before it (log order), for a diff focus."""
    order = list(
        dict.fromkeys(e.kernel_path for e in run.events if isinstance(e, ToolCallEvent) and e.kernel_path)
    )
    return dict(zip(order[1:], order[:-1], strict=True))


@dataclass
class _Context:
    """What one `render_run` call carries from turn to turn: kernels already printed, diff bases."""

    run: RunData
    opts: ShowOptions
    previous: dict[str, str]
    shown: set[str]


@dataclass(frozen=True)
class Focus:
    """Where to centre a collapsed kernel and why; `same_as` names an identical earlier candidate."""

    line: int | None = None
    why: str = ""
    same_as: str | None = None


def kernel_focus(path: str, error_line: int | None, ctx: _Context) -> Focus:
    """A compile error's line, else the first line changed from the previous candidate."""
    if error_line:
        return Focus(error_line, f"error at line {error_line}")
    base = ctx.previous.get(path)
    source, base_source = ctx.run.kernels.get(path), ctx.run.kernels.get(base or "")
    if source is None or base is None or base_source is None:
        return Focus()
    changed = first_changed_line(source, base_source)
    if changed is None:
        return Focus(None, f"same code as {base}", same_as=base)
    return Focus(changed, f"first change from {base} at line {changed}")


def render_kernel(path: str, error_line: int | None, ctx: _Context) -> Iterator[RenderableType]:
    source = ctx.run.kernels.get(path)
    if source is None:
        yield Text(f"{path} (file missing)", style=BAD_STYLE)
        return
    focus = kernel_focus(path, error_line, ctx)
    total = len(source.splitlines())
    if path in ctx.shown:
        yield Text(f"{path} · {total} lines (shown above)", style=DIM)
        return
    yield Text(f"{path} · {total} lines" + (f" · {focus.why}" if focus.why else ""), style=DIM)
    if ctx.opts.code and (focus.same_as is None or ctx.opts.full):
        ctx.shown.add(path)
        yield from render_source(source, focus.line, ctx.opts.full)


def render_source(source: str, focus: int | None, full: bool) -> Iterator[RenderableType]:
    """Python source, syntax-highlighted; collapsed to a window around `focus` unless `full`."""
    total = len(source.splitlines())
    start, end = code_window(source, focus, full)
    yield Syntax(
        source,
        "python",
        line_numbers=True,
        line_range=(start, end),
        highlight_lines={focus} if focus and not full else set(),
        background_color="default",
        word_wrap=False,
    )
    if end - start + 1 < total:
        yield Text(f"… lines {start}–{end} of {total} (--full shows all)", style=DIM)


def render_tool_call(call: ToolCallEvent, ctx: _Context) -> Iterator[RenderableType]:
    body: list[RenderableType] = []
    extra = {k: v for k, v in call.arguments.items() if k not in ("kernel_path", "kernel_code")}
    if extra:
        body.append(Text(json.dumps(extra, sort_keys=True), style=DIM))
    if call.kernel_path:
        body += render_kernel(call.kernel_path, first_error_line(call), ctx)
    yield labelled(f"call → {call.name}", Group(*body) if body else Text("(no arguments)", style=DIM))
    style = OK_STYLE if call.status == "ok" and not call.is_error else BAD_STYLE
    yield labelled(
        f"result ← {call.name} ({call.status})", Group(*render_result(call, ctx.opts)), style=style
    )


def parse_result(call: ToolCallEvent) -> CompileResult | BenchResult | None:
    model = {"compile_kernel": CompileResult, "benchmark": BenchResult, "final_recheck": BenchResult}.get(
        call.name
    )
    if model is None or not call.result:
        return None
    try:
        return model.model_validate(call.result)
    except ValidationError:
        return None


def render_result(call: ToolCallEvent, opts: ShowOptions) -> Iterator[RenderableType]:
    result = parse_result(call)
    if isinstance(result, CompileResult):
        yield from render_compile(result, call.kernel_path)
    elif isinstance(result, BenchResult):
        yield from render_bench(result, call.kernel_path, opts)
    if result is None or opts.full:
        yield labelled("told the model", Text(call.summary or "(nothing)"), style=DIM)
    yield Text(f"{fmt_seconds(call.seconds)} in {call.name}", style=DIM)


def render_diagnostic(diag: Diagnostic, kernel_path: str | None) -> Text:
    if diag.candidate_line is not None:
        where = f"{kernel_path or 'kernel'}:{diag.candidate_line}"
    else:
        where = f"{diag.generated_file or 'generated'}:{diag.generated_line or '?'}"
    text = Text.assemble((where, "bold"), ": ", (f"error: {diag.message}", BAD_STYLE))
    if diag.source_line:
        text.append(f"\n    {diag.source_line}", style=DIM)
    return text


def render_compile(result: CompileResult, kernel_path: str | None) -> Iterator[RenderableType]:
    if result.ok:
        cached = " (cached)" if result.cached else ""
        yield Text(f"compiled in {fmt_seconds(result.seconds)}{cached}: {result.message}", style=OK_STYLE)
    else:
        yield Text(f"{result.status}: {result.message}", style=BAD_STYLE)
    for diag in result.errors:
        yield render_diagnostic(diag, kernel_path)
    for kernel in result.kernels:
        spills = (kernel.spill_stores or 0) + (kernel.spill_loads or 0)
        registers = "?" if kernel.registers is None else kernel.registers
        yield Text(f"{kernel.name}: {registers} registers, {spills} spill bytes", style=DIM)


def case_sizes(case: CaseResult) -> str:
    short = {"batch_size": "B", "seq_len": "L", "d_model": "D", "d_state": "N"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in case.sizes.items())


def bench_verdict(result: BenchResult) -> Text:
    if result.correct and result.speedup is not None:
        primary = result.primary_timing
        text = Text(f"correct · {fmt_speedup(result.speedup)} vs the reference", style=OK_STYLE)
        if primary and primary.candidate and primary.reference:
            text.append(
                f" ({primary.name}: {fmt_ms(primary.candidate.median_ms)} vs "
                f"{fmt_ms(primary.reference.median_ms)}, rse {primary.candidate.rse:.1%})",
                style=DIM,
            )
        return text
    return Text(f"{result.status}: {result.message}", style=BAD_STYLE)


def cases_table(cases: list[CaseResult], all_cases: bool) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style=DIM)
    for column in ("case", "sizes", "status", "max abs", "rel L2", "why"):
        table.add_column(column)
    for case in cases:
        if all_cases or case.status != "passed":
            style = OK_STYLE if case.status == "passed" else BAD_STYLE
            table.add_row(
                case.name,
                case_sizes(case),
                Text(case.status, style=style),
                fmt_err(case.max_abs_err),
                fmt_err(case.rel_l2_err),
                case.message,
            )
    return table


def timings_table(timings: list[ShapeTiming]) -> Table:
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style=DIM)
    for column in ("shape", "candidate", "rse", "reference", "speedup"):
        table.add_column(column, justify="left" if column == "shape" else "right")
    for timing in timings:
        cand, ref = timing.candidate, timing.reference
        table.add_row(
            timing.name + (" *" if timing.primary else ""),
            fmt_ms(cand.median_ms if cand else None),
            f"{cand.rse:.1%}" if cand else "–",
            fmt_ms(ref.median_ms if ref else None),
            fmt_speedup(timing.speedup),
        )
    return table


def render_bench(result: BenchResult, kernel_path: str | None, opts: ShowOptions) -> Iterator[RenderableType]:
    yield bench_verdict(result)
    if result.compile and not result.compile.ok:
        yield from render_compile(result.compile, kernel_path)
    if result.cases:
        passed = sum(c.status == "passed" for c in result.cases)
        style = OK_STYLE if passed == len(result.cases) else BAD_STYLE
        yield Text(f"{passed}/{len(result.cases)} correctness cases passed", style=style)
        if opts.full or passed < len(result.cases):
            yield cases_table(result.cases, all_cases=opts.full)
    for flag in result.flag_details:
        yield Text(f"flag {flag.name}: {flag.message}", style=BAD_STYLE if flag.disqualifying else "yellow")
    if result.timings:
        yield timings_table(result.timings)
    if result.usage and result.usage.own_share is not None:
        shares = [f"own kernels {result.usage.own_share:.0%}"]
        shares += [f"{k} {v:.0%}" for k, v in result.usage.library_share.items()]
        yield Text("device time: " + " · ".join(shares), style=DIM)


def render_best(event: BestEvent) -> Text:
    label = "final re-check" if event.final else "new best"
    return Text(
        f"{label}: {fmt_speedup(event.speedup)} · {event.kernel_path} · "
        f"{fmt_ms(event.median_ms)} (rse {event.rse:.1%})",
        style="bold yellow",
    )


def render_event(event: Event, ctx: _Context) -> Iterator[RenderableType]:
    if isinstance(event, ModelCallEvent):
        yield from render_model_call(event)
    elif isinstance(event, ToolCallEvent):
        yield from render_tool_call(event, ctx)
    elif isinstance(event, BestEvent):
        yield render_best(event)
    elif isinstance(event, ErrorEvent):
        yield Text(f"error in {event.where}: {event.message}", style=BAD_STYLE)


def render_unanswered(block: ToolUseBlock, ctx: _Context) -> Iterator[RenderableType]:
    """A call the model made whose result never reached the log (the run stopped first)."""
    if block.kernel_code is not None:
        yield Text(f"submitted kernel · {len(block.kernel_code.splitlines())} lines", style=DIM)
        if ctx.opts.code:
            yield from render_source(block.kernel_code, None, ctx.opts.full)
    if ctx.run.status.state == "running":
        yield Text("no result yet (the run is still going)", style="yellow")
    else:
        yield Text("no result logged", style=BAD_STYLE)


def display_order(events: list[Event]) -> list[Event]:
    """Log order, except that a new best follows the call that found it (the loop logs it first)."""
    ordered = list(events)
    for best in [e for e in events if isinstance(e, BestEvent)]:
        here = ordered.index(best)
        later = [
            i
            for i, e in enumerate(ordered)
            if i > here and isinstance(e, ToolCallEvent) and e.kernel_path == best.kernel_path
        ]
        if later:
            ordered.insert(later[0], ordered.pop(here))
    return ordered


def render_turn(turn: TurnData, ctx: _Context) -> Group:
    run = ctx.run
    if run.parallel and turn.trajectory is None:  # run-level: the final re-check of every trajectory's best
        header = Text("final re-check (all trajectories)", style="bold")
    else:
        header = turn_header(turn, run.scripted)
    parts: list[RenderableType] = [header]
    for event in display_order(turn.events):
        parts += render_event(event, ctx)
    for block in turn.unanswered:
        parts.append(labelled(f"call → {block.name}", Group(*render_unanswered(block, ctx))))
    if not turn.complete and run.status.state == "killed":
        parts.append(Text("(the run was killed during this turn)", style=BAD_STYLE))
    return Group(*parts)


# ---------------------------------------------------------------- whole run


def run_header(run: RunData) -> Group:
    info, env = run.info, run.info.environment
    model = model_label(run)
    if run.scripted and info.config.trajectory:
        model += f" ({info.config.trajectory})"
    status = run.status.label
    message = run.summary.message if run.summary else (run.run_end.message if run.run_end else "")
    if message:
        status += f": {message}"
    machine = [
        env.host,
        env.gpu or "",
        f"torch {env.torch}" if env.torch else "",
        f"CUDA {env.cuda}" if env.cuda else "",
    ]
    rows = [
        ("problem", f"{info.problem} ({info.config.problem_path})"),
        ("model", model),
        ("status", Text(status, style=status_style(run))),
        ("started", " · ".join([fmt_time(info.started_at), *[m for m in machine if m]])),
    ]
    if run.parallel:
        rows.append(("parallel", parallel_line(run)))
    return Group(Rule(Text(info.run_id, style="bold"), align="left"), grid(rows))


def parallel_line(run: RunData) -> str:
    cfg = run.info.config
    where = f"Ray ({cfg.ray_address or 'local instance'})" if cfg.executor == "ray" else "this machine"
    gpus = f" · GPUs {','.join(map(str, cfg.gpus))}" if cfg.gpus else ""
    return f"{cfg.parallel} at once · {len(run.trajectories)} trajectories (up to {cfg.branches} branches) · tools on {where}{gpus}"


def trajectories_table(trajectories: list[TrajectoryData]) -> Table:
    table = Table(header_style="bold", box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for column in ("trajectory", "kind", "turns", "benchmarks", "best", "ended"):
        table.add_column(column, justify="right" if column in ("turns", "benchmarks", "best") else "left")
    for t in trajectories:
        kind = f"branch of {t.from_kernel}" if t.kind == "branch" else t.kind
        table.add_row(
            str(t.number), kind, str(len(t.turns)), str(len(t.benchmarks)), fmt_speedup(t.best_speedup),
            t.exit_status or "–",
        )  # fmt: skip
    return table


def leases_line(run: RunData) -> str:
    """How long tools held and waited for leases, per kind and resource."""
    held: dict[str, list[float]] = {}
    for span in run.leases:
        if span.released is not None:
            held.setdefault(f"{span.kind} {span.resource}", []).append(
                (span.released - span.acquired).total_seconds()
            )
    return " · ".join(f"{name}: {len(v)}× {sum(v):.0f}s" for name, v in sorted(held.items()))


def status_style(run: RunData) -> str:
    return {"running": "yellow", "killed": BAD_STYLE}.get(run.status.state, OK_STYLE)


def tokens_by_kind(usage: Usage) -> str:
    return (
        f"in={usage.tokens_in:,} (input {usage.input_tokens:,} · cache read {usage.cache_read_tokens:,} · "
        f"cache write {usage.cache_write_tokens:,}) · out={usage.output_tokens:,} "
        f"(thinking {usage.thinking_tokens:,}) · total={usage.total:,}"
    )


def best_line(run: RunData) -> str:
    if run.best_speedup is None:
        return "no correct kernel"
    parts = [fmt_speedup(run.best_speedup)]
    if run.best_kernel_path:
        parts.append(run.best_kernel_path)
    best = run.best
    if best:
        parts.append(f"turn {best.turn}" + (", re-checked" if best.final else ""))
    if "best.py" in run.kernels:
        parts.append(f"saved as {run.path / 'best.py'}")
    return " · ".join(parts)


def run_footer(run: RunData) -> Group:
    llm, tools = run.llm_seconds, run.tool_seconds
    wall = run.wall_seconds
    total = wall if wall else llm + tools
    time = f"{fmt_duration(wall)} wall · {fmt_seconds(llm)} LLM ({fmt_pct(llm, total)}) · "
    time += f"{fmt_seconds(tools)} tools ({fmt_pct(tools, total)})"
    rows: list[tuple[str, RenderableType]] = [("time", time)]
    if run.scripted:
        rows += [("tokens", f"none ({SCRIPTED_LABEL})"), ("cost", f"none ({SCRIPTED_LABEL})")]
    else:
        rows += [("tokens", tokens_by_kind(run.usage)), ("cost", fmt_cost(run.cost_usd))]
    rows.append(("best", best_line(run)))
    rows.append(("turns", f"{run.turn_count} · {run.status.label}"))
    if run.leases:
        rows.append(("leases", leases_line(run)))
    for error in (e for e in run.errors if e.turn is None):
        rows.append(("error", Text(f"{error.where}: {error.message}", style=BAD_STYLE)))
    for note in run.notes:
        rows.append(("note", Text(note, style="yellow")))
    return Group(Rule("total", align="left"), grid(rows))


def select_turns(turns: list[TurnData], opts: ShowOptions) -> list[TurnData]:
    if opts.trajectory is not None:
        turns = [t for t in turns if t.trajectory == opts.trajectory]
    if opts.turn is not None:
        return [t for t in turns if t.turn == opts.turn]
    if opts.last is not None:
        return turns[-opts.last :] if opts.last > 0 else []
    return turns


def render_run(run: RunData, opts: ShowOptions | None = None) -> Group:
    """The whole `agent show` page: header, the selected turns, the run's totals."""
    opts = opts or ShowOptions()
    turns = run.turns
    chosen = select_turns(turns, opts)
    ctx = _Context(run=run, opts=opts, previous=previous_kernels(run), shown=set())
    parts: list[RenderableType] = [run_header(run)]
    if run.parallel and opts.trajectory is None:
        parts += [Text(""), trajectories_table(run.trajectories)]
    if opts.trajectory is not None:
        parts.append(Text(f"showing trajectory {opts.trajectory} of {len(run.trajectories)}", style=DIM))
    elif len(chosen) != len(turns):
        shown = ", ".join(str(t.turn) for t in chosen) or "none"
        parts.append(Text(f"showing turn {shown} of {len(turns)}", style=DIM))
    for turn in chosen:
        parts += [Text(""), render_turn(turn, ctx)]
    end = run.run_end
    if end and (opts.turn is None or not chosen or chosen[-1] is turns[-1]):
        parts.append(Text(f"run ended: {end.exit_status}" + (f" ({end.message})" if end.message else "")))
    parts += [Text(""), run_footer(run)]
    return Group(*parts)


# ---------------------------------------------------------------- agent ls


LS_WIDE, LS_NARROW = 152, 100
"""`agent ls` keeps run ids on one line from LS_WIDE columns; below LS_NARROW it leaves out the problem
column (the run id names the problem)."""

LS_COLUMNS = ["run", "problem", "model", "status", "turns", "tokens", "cost", "wall", "best"]


@dataclass(frozen=True)
class RunTable:
    """The `agent ls` table; it lays itself out for the console width it is given."""

    listings: list[RunListing]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)
        for listing in self.listings:
            if listing.error:
                yield Text(listing.error, style=BAD_STYLE)

    def table(self, width: int) -> Table:
        wide = width >= LS_WIDE
        columns = [c for c in LS_COLUMNS if c != "problem" or width >= LS_NARROW]
        table = Table(
            header_style="bold underline", box=None, pad_edge=False, padding=(0, 2 if wide else 1, 0, 0)
        )
        for column in columns:
            if column in ("run", "problem", "model", "status"):
                limit = None if wide else (24 if column == "run" else 14)
                table.add_column(column, no_wrap=wide, overflow="fold", max_width=limit)
            else:
                table.add_column(column, justify="right", no_wrap=True)
        for listing in self.listings:
            cells = ls_row(listing)
            table.add_row(*[cells.get(c, "") for c in columns])
        return table


def ls_row(listing: RunListing) -> dict[str, RenderableType]:
    run = listing.run
    if run is None:
        return {"run": listing.path.name, "status": Text("unreadable", style=BAD_STYLE)}
    return {
        "run": run.run_id,
        "problem": run.info.problem,
        "model": model_label(run),
        "status": Text(run.status.label, style=status_style(run)),
        "turns": str(run.turn_count) + (f" ({len(run.trajectories)} traj.)" if run.parallel else ""),
        "tokens": "–" if run.scripted else f"{run.usage.total:,}",
        "cost": "–" if run.scripted else fmt_cost(run.cost_usd),
        "wall": fmt_duration(run.wall_seconds),
        "best": fmt_speedup(run.best_speedup),
    }


def render_ls(listings: list[RunListing]) -> RenderableType:
    """One row per run, newest first as given; why a directory was unreadable is said below the table."""
    if not listings:
        return Text("no runs", style=DIM)
    return RunTable(listings)
