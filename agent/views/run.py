"""The `agent show` page and the `agent ls` table: run data in, rich renderables out.

Nothing here prints; the CLI owns the Console. Each event is drawn by agent.views.event (the live display
draws them the same way); this module lays out the run around them: header, turns, totals.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from agent.runlog.data import RunData, ToolUseBlock, TrajectoryData, TurnData
from agent.runlog.events import BestEvent, Event, RejudgeEvent, ToolCallEvent
from agent.runlog.reader import RunListing
from agent.views.event import render_event, turn_header
from agent.views.fmt import (
    BAD_STYLE,
    DIM,
    OK_STYLE,
    SCRIPTED_LABEL,
    fmt_cost,
    fmt_duration,
    fmt_figures,
    fmt_headline,
    fmt_pct,
    fmt_seconds,
    fmt_speedup,
    fmt_time,
    grid,
    indent,
    labelled,
    tokens_by_kind,
)
from agent.views.kernel import KernelShelf, source_view
from agent.views.redteam import redteam_summary


@dataclass(frozen=True)
class ShowOptions:
    trajectory: int | None = None
    turn: int | None = None
    last: int | None = None
    full: bool = False
    code: bool = True


def model_label(run: RunData) -> str:
    return SCRIPTED_LABEL if run.scripted else f"{run.info.provider}/{run.info.model}"


def unanswered_view(block: ToolUseBlock, run: RunData, opts: ShowOptions) -> Iterator[RenderableType]:
    """A call the model made whose result never reached the log (the run stopped first)."""
    if block.kernel_code is not None:
        yield Text(f"submitted kernel · {len(block.kernel_code.splitlines())} lines", style=DIM)
        if opts.code:
            yield from source_view(block.kernel_code, None, opts.full)
    if run.status.state == "running":
        yield Text("no result yet (the run is still going)", style="yellow")
    else:
        yield Text("no result logged", style=BAD_STYLE)


def display_order(events: list[Event]) -> list[Event]:
    """Log order, except that a new best follows the call that found it (some logs have it first)."""
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


def turn_view(turn: TurnData, run: RunData, opts: ShowOptions, shelf: KernelShelf) -> Group:
    if run.parallel and turn.trajectory is None:  # run-level: the final re-check of every trajectory's best
        header = Text("final re-check (all trajectories)", style="bold")
    else:
        header = turn_header(turn, run.scripted)
    parts: list[RenderableType] = [header]
    for event in display_order(turn.events):
        parts += render_event(event, opts.full, shelf)
    for block in turn.unanswered:
        parts.append(labelled(f"call → {block.name}", Group(*unanswered_view(block, run, opts))))
    if not turn.complete and run.status.state == "killed":
        parts.append(Text("(the run was killed during this turn)", style=BAD_STYLE))
    return Group(*parts)


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
    rows: list[tuple[str, RenderableType]] = [
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
    if run.status.failed:
        return BAD_STYLE
    return {"running": "yellow", "killed": BAD_STYLE}.get(run.status.state, OK_STYLE)


def best_line(run: RunData) -> str:
    if run.best_speedup is None:
        return "no correct kernel"
    parts = [fmt_figures(run.best_kernel, run.best_speedup)]
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
    if recheck := run.recheck_seconds:
        time += f" · {fmt_seconds(recheck)} final re-check ({fmt_pct(recheck, total)})"
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
    shelf = KernelShelf.of_run(run.kernels, run.events, opts.code, opts.full)
    parts: list[RenderableType] = [run_header(run)]
    if run.parallel and opts.trajectory is None:
        parts += [Text(""), trajectories_table(run.trajectories)]
    if opts.trajectory is not None:
        parts.append(Text(f"showing trajectory {opts.trajectory} of {len(run.trajectories)}", style=DIM))
    elif len(chosen) != len(turns):
        shown = ", ".join(str(t.turn) for t in chosen) or "none"
        parts.append(Text(f"showing turn {shown} of {len(turns)}", style=DIM))
    for turn in chosen:
        parts += [Text(""), turn_view(turn, run, opts, shelf)]
    end = run.run_end
    if end and (opts.turn is None or not chosen or chosen[-1] is turns[-1]):
        parts.append(Text(f"run ended: {end.exit_status}" + (f" ({end.message})" if end.message else "")))
    if rejudged := [e for e in run.events if isinstance(e, RejudgeEvent)]:
        parts += [Text(""), redteam_summary(rejudged)]
    parts += [Text(""), run_footer(run)]
    return Group(*parts)


UNBOUNDED_WIDTH = 100_000
LS_REST_MIN, LS_PROBLEM_MIN = 60, 80
"""Columns left beside the run ids below which `agent ls` lists each run as its id, then its details on
the next line; and beside which the problem column is shown (the run id names the problem anyway)."""

LS_COLUMNS = ["run", "problem", "model", "status", "turns", "tokens", "cost", "wall", "best", "eager"]


@dataclass(frozen=True)
class RunTable:
    """The `agent ls` table; it lays itself out for the console width it is given, and never breaks a run
    id, so that one copied from it is whole (a console narrower than an id shows it past the edge)."""

    listings: list[RunListing]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        id_width = max(len(ls_run_id(listing)) for listing in self.listings)
        wide = self.table(width, id_width, wide=True)
        unbounded = options.update_width(UNBOUNDED_WIDTH)
        if Measurement.get(console, unbounded, wide).maximum <= width:  # every cell on one line
            yield wide
        elif width - id_width >= LS_REST_MIN:
            yield self.table(width, id_width, wide=False)
        else:
            yield from self.stacked()
        for listing in self.listings:
            if listing.error:
                yield Text(listing.error, style=BAD_STYLE)

    def table(self, width: int, id_width: int, wide: bool) -> Table:
        columns = [c for c in LS_COLUMNS if c != "problem" or wide or width - id_width >= LS_PROBLEM_MIN]
        table = Table(
            header_style="bold underline", box=None, pad_edge=False, padding=(0, 2 if wide else 1, 0, 0)
        )
        for column in columns:
            if column == "run":
                table.add_column(column, no_wrap=True, min_width=id_width)
            elif column in ("problem", "model", "status"):
                table.add_column(column, no_wrap=wide, overflow="fold", max_width=None if wide else 14)
            else:
                table.add_column(column, justify="right", no_wrap=True)
        for listing in self.listings:
            cells = ls_row(listing)
            table.add_row(*[cells.get(c, "") for c in columns])
        return table

    def stacked(self) -> Iterator[RenderableType]:
        """Each run as its id on a line of its own (never wrapped), then its details, indented."""
        for listing in self.listings:
            cells = ls_row(listing)
            del cells["run"]
            yield Text(ls_run_id(listing), style="bold", no_wrap=True, overflow="ignore")
            details = Text(" · ", style=DIM).join(
                ls_detail(column, cells[column]) for column in LS_COLUMNS if column in cells
            )
            yield indent(details)


def ls_detail(column: str, cell: RenderableType) -> Text:
    """A cell of the table as a detail of the stacked list, named where a bare number would not say."""
    text = cell if isinstance(cell, Text) else Text(str(cell))
    names = {"turns": "turns ", "tokens": "tokens ", "cost": "cost ", "wall": "wall ", "best": "best ",
             "eager": "eager speedup "}  # fmt: skip
    return Text.assemble(names.get(column, ""), text)


def ls_run_id(listing: RunListing) -> str:
    return listing.run.run_id if listing.run else listing.path.name


def ls_row(listing: RunListing) -> dict[str, RenderableType]:
    run = listing.run
    if run is None:
        return {"run": ls_run_id(listing), "status": Text("unreadable", style=BAD_STYLE)}
    best = run.best_kernel
    eager = {"eager": fmt_speedup(best.eager_speedup)} if best and best.eager_speedup is not None else {}
    return {
        "run": ls_run_id(listing),
        "problem": run.info.problem,
        "model": model_label(run),
        "status": Text(run.status.label, style=status_style(run)),
        "turns": str(run.turn_count) + (f" ({len(run.trajectories)} traj.)" if run.parallel else ""),
        "tokens": "–" if run.scripted else f"{run.usage.total:,}",
        "cost": "–" if run.scripted else fmt_cost(run.cost_usd),
        "wall": fmt_duration(run.wall_seconds),
        "best": fmt_headline(best, run.best_speedup),
        **eager,  # the eager speedup, secondary (older logs: none)
    }


def render_ls(listings: list[RunListing]) -> RenderableType:
    """One row per run, newest first as given; why a directory was unreadable is said below the table."""
    if not listings:
        return Text("no runs", style=DIM)
    return RunTable(listings)
