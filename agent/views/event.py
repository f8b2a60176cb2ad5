"""One logged event as rich renderables: the one view of each event, for `agent show` (whole turns, with
kernel sources) and for the live display of `agent run` (as each event happens).

    turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468
    reasoning / assistant / call → compile_kernel / result ← compile_kernel (ok)
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agent import toolbox
from agent.runlog.data import TurnData
from agent.runlog.events import (
    AttackEvent,
    BestEvent,
    ErrorEvent,
    Event,
    ModelCallEvent,
    RejudgeEvent,
    ToolCallEvent,
    TrajectoryEvent,
    TurnEndEvent,
)
from agent.views.fmt import (
    BAD_STYLE,
    DIM,
    OK_STYLE,
    SCRIPTED_LABEL,
    fmt_cost,
    fmt_figures,
    fmt_ms,
    fmt_seconds,
    labelled,
    tokens_line,
)
from agent.views.kernel import KernelShelf, kernel_view
from agent.views.result import first_error_line

LIVE_TEXT_LINES = 6  # the live display clips the model's reasoning and text to this many lines


def turn_label(turn: TurnData) -> str:
    return (
        f"turn {turn.turn}" if turn.trajectory is None else f"trajectory {turn.trajectory} · turn {turn.turn}"
    )


def turn_header(turn: TurnData, scripted: bool) -> Text:
    """`turn 1 · 127.4s turn · 48.5s LLM · 78.8s tools · tokens in=2,805 · out=4,663 · total=7,468 · $0.057`
    (the cost, from the provider's price table, where it is not zero: a model of unknown price has none)."""
    parts = [f"{fmt_seconds(turn.turn_seconds)} turn" if turn.complete else "incomplete (no turn_end)"]
    parts += [f"{fmt_seconds(turn.llm_seconds)} LLM", f"{fmt_seconds(turn.tool_seconds)} tools"]
    parts.append(SCRIPTED_LABEL if scripted else tokens_line(turn.usage))
    if not scripted and turn.cost_usd:
        parts.append(fmt_cost(turn.cost_usd))
    return Text.assemble((turn_label(turn), "bold"), (" · " + " · ".join(parts), "bold dim"))


def clipped(text: str, lines: int | None) -> str:
    rows = text.strip().splitlines()
    if lines is None or len(rows) <= lines:
        return text
    return "\n".join([*rows[:lines], f"… ({len(rows) - lines} more lines)"])


def model_call_view(call: ModelCallEvent, clip: int | None = None) -> Iterator[RenderableType]:
    if call.status == "error":
        yield Text(f"model call failed: {call.error or 'no message'}", style=BAD_STYLE)
    if call.reasoning:
        reasoning = Text(clipped(call.reasoning, clip), style="italic dim")
        yield labelled("reasoning", reasoning, style="bold magenta")
    if call.text:
        yield labelled("assistant", Text(clipped(call.text, clip)))
    if call.status == "ok" and call.stop_reason not in ("tool_use", "end_turn", None):
        yield Text(f"stop_reason: {call.stop_reason}", style="yellow")


def call_result_view(call: ToolCallEvent, full: bool) -> Iterator[RenderableType]:
    """The tool's own view of its result; what the model was told when there is none (or `full`)."""
    tool = toolbox.find(call.name)
    result = tool.parse(call.result) if tool else None
    if tool is not None and result is not None:
        yield from tool.view(result, call.kernel_path, full)
    if result is None or full:
        yield labelled("told the model", Text(call.summary or "(nothing)"), style=DIM)
    yield Text(f"{fmt_seconds(call.seconds)} in {call.name}", style=DIM)


def tool_call_view(call: ToolCallEvent, full: bool, shelf: KernelShelf | None) -> Iterator[RenderableType]:
    """`call → name` with its kernel (the source when a shelf of the run's kernels is given), then
    `result ← name (status)`."""
    body: list[RenderableType] = []
    extra = {k: v for k, v in call.arguments.items() if k not in ("kernel_path", "kernel_code")}
    if extra:
        body.append(Text(json.dumps(extra, sort_keys=True), style=DIM))
    if call.kernel_path and shelf is not None:
        body += kernel_view(call.kernel_path, first_error_line(toolbox.parse_result(call)), shelf)
    elif call.kernel_path:
        body.append(Text(call.kernel_path, style=DIM))
    yield labelled(f"call → {call.name}", Group(*body) if body else Text("(no arguments)", style=DIM))
    style = OK_STYLE if call.status == "ok" and not call.is_error else BAD_STYLE
    yield labelled(f"result ← {call.name} ({call.status})", Group(*call_result_view(call, full)), style=style)


def best_view(event: BestEvent) -> Text:
    label = "final re-check" if event.final else "new best"
    return Text(
        f"{label}: {fmt_figures(event, event.speedup)} · {event.kernel_path} · "
        f"{fmt_ms(event.median_ms)} (rse {event.rse:.1%})",
        style="bold yellow",
    )


def trajectory_view(event: TrajectoryEvent) -> Text:
    if event.action == "started":
        source = f" from {event.from_kernel}" if event.from_kernel else ""
        return Text(f"trajectory {event.trajectory} started ({event.kind}{source})", style="bold magenta")
    return Text.assemble(
        (f"trajectory {event.trajectory} ended", "bold magenta"), f": {event.exit_status}: {event.message}"
    )


def render_event(
    event: Event, full: bool = False, shelf: KernelShelf | None = None, clip: int | None = None
) -> Iterator[RenderableType]:
    """An event of a turn (turn ends are the turn's header; leases and run marks are not turn events)."""
    if isinstance(event, ModelCallEvent):
        yield from model_call_view(event, clip)
    elif isinstance(event, ToolCallEvent):
        yield from tool_call_view(event, full, shelf)
    elif isinstance(event, BestEvent):
        yield best_view(event)
    elif isinstance(event, ErrorEvent):
        yield Text(f"error in {event.where}: {event.message}", style=BAD_STYLE)
    elif isinstance(event, RejudgeEvent):  # run-level: the live display's line as each is re-judged
        yield Text(f"re-judged {event.kernel_path} ({event.attack}): {event.outcome}", style="magenta")
    elif isinstance(event, AttackEvent):
        yield Text(
            f"attack {event.name}" + (f": {event.description}" if event.description else ""), style="magenta"
        )


def live_view(event: Event, scripted: bool) -> RenderableType | None:
    """An event as the live display prints it when it happens (None: it prints nothing for it)."""
    if isinstance(event, TrajectoryEvent):
        return trajectory_view(event)
    if isinstance(event, TurnEndEvent):  # the turn's header, once its totals are known
        turn = TurnData(turn=event.turn, events=[event], end=event, trajectory=event.trajectory)
        return Group(turn_header(turn, scripted), Text(""))
    parts = list(render_event(event, clip=LIVE_TEXT_LINES))
    if not parts:
        return None
    if event.trajectory is None:
        return Group(*parts)
    tagged = Table.grid(padding=(0, 1))  # a parallel run's trajectories interleave: each event says whose
    tagged.add_column(style="magenta", no_wrap=True)
    tagged.add_column()
    tagged.add_row(f"t{event.trajectory}", Group(*parts))
    return tagged
