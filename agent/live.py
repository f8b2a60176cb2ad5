"""What a run shows while it runs: the loop talks to a `Display` (agent.cmd_run's is the terminal's)."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

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
