"""What a run shows while it runs: a status line (turn, phase, tokens, cost, best, time) kept at the
bottom of the terminal, and each event above it as it is logged (drawn by agent.event_view, as
`agent show` draws it). The loop talks to a `Display`; `RichDisplay` is the terminal's (agent.cmd_run
runs it under a rich Live)."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel
from rich.console import Console, RenderableType
from rich.text import Text

from agent.event_view import live_view
from agent.events import Event, Usage


class Progress(BaseModel):
    """What the live status line shows."""

    turn: int
    phase: str
    usage: Usage
    cost_usd: float
    best_speedup: float | None
    elapsed_s: float
    scripted: bool


class Display(Protocol):
    def progress(self, progress: Progress) -> None: ...

    def event(self, event: Event) -> None: ...


class NullDisplay:
    def progress(self, progress: Progress) -> None:
        pass

    def event(self, event: Event) -> None:
        pass


def status_text(p: Progress) -> str:
    minutes, seconds = divmod(int(p.elapsed_s), 60)
    best = f"{p.best_speedup:.2f}x" if p.best_speedup is not None else "—"
    tokens = (
        "0 tokens (scripted playback)"
        if p.scripted
        else f"tokens in={p.usage.tokens_in:,} out={p.usage.output_tokens:,}"
    )
    return f"turn {p.turn} · {p.phase} · {tokens} · ${p.cost_usd:.2f} · best {best} · {minutes}:{seconds:02d}"


class RichDisplay:
    def __init__(self, console: Console, scripted: bool) -> None:
        self.console = console
        self.live: Any = None
        self.scripted = scripted

    def status_line(self, progress: Progress) -> RenderableType:
        return Text(status_text(progress), style="cyan")

    def progress(self, progress: Progress) -> None:
        if self.live is not None:
            self.live.update(self.status_line(progress))

    def event(self, event: Event) -> None:
        view = live_view(event, self.scripted)
        if view is not None:
            self.console.print(view)
