"""What a run shows while it runs: a status line (turn, phase and its seconds, what a build compiles now,
tokens, cost, best, time) kept at the bottom of the terminal, and each event above it as it is logged
(drawn by agent.views.event, as `agent show` draws it). The loop talks to a `Display`; `RichDisplay` is the
terminal's (agent.cli.run runs it under a rich Live, whose refreshes redraw the line from the clock, so it
keeps ticking through a long compile with no new event)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field
from rich.console import Console
from rich.text import Text

from agent.runlog.events import Event, Usage
from agent.views.event import live_view

Clock = Callable[[], float]  # time.monotonic, or a test's own


class BuildStep(BaseModel):
    """A fresh build as its worker last reported it: the outputs being compiled (each with the clock time
    it was first reported) and how many are done."""

    extension: str
    compiling: dict[str, float] = Field(default_factory=dict)
    finished: int = 0


class Progress(BaseModel):
    """What the live status line shows. Times are of `Clock` (time.monotonic): `taken_at` is when this was
    taken, when the run's wall time was `elapsed_s`; the line adds what has passed since."""

    turn: int
    phase: str
    usage: Usage
    cost_usd: float
    best_speedup: float | None
    elapsed_s: float
    best_headline: str | None = None  # the best's headline as everywhere (`39% of floor`); else its speedup
    scripted: bool
    taken_at: float = Field(default_factory=time.monotonic)
    phase_since: float | None = None
    build: BuildStep | None = None


class Display(Protocol):
    def progress(self, progress: Progress) -> None: ...

    def event(self, event: Event) -> None: ...


class NullDisplay:
    def progress(self, progress: Progress) -> None:
        pass

    def event(self, event: Event) -> None:
        pass


def clock_text(seconds: float) -> str:
    """`0:07`, `12:34`, `1:02:03`."""
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def build_text(build: BuildStep, now: float) -> str:
    """`scan_ext: main.o 0:52, cuda.cuda.o 0:03 (1 done)`: the longest-running outputs first."""
    running = sorted(build.compiling.items(), key=lambda item: item[1])
    shown = [f"{name} {clock_text(now - since)}" for name, since in running[:2]]
    if len(running) > 2:
        shown.append(f"+{len(running) - 2} more")
    what = ", ".join(shown) or ("finishing" if build.finished else "starting")
    done = f" ({build.finished} done)" if build.finished else ""
    return f"{build.extension}: {what}{done}"


def status_text(p: Progress, now: float | None = None) -> str:
    """The status line at clock time `now` (default: when `p` was taken)."""
    now = p.taken_at if now is None else now
    best = p.best_headline or (f"{p.best_speedup:.2f}×" if p.best_speedup is not None else "—")
    tokens = (
        "0 tokens (scripted playback)"
        if p.scripted
        else f"tokens in={p.usage.tokens_in:,} out={p.usage.output_tokens:,}"
    )
    phase = p.phase if p.phase_since is None else f"{p.phase} {clock_text(now - p.phase_since)}"
    parts = [f"turn {p.turn}", phase]
    if p.build is not None:
        parts.append(build_text(p.build, now))
    elapsed = p.elapsed_s + max(0.0, now - p.taken_at)
    parts += [tokens, f"${p.cost_usd:.2f}", f"best {best}", clock_text(elapsed)]
    return " · ".join(parts)


@dataclass(frozen=True)
class StatusLine:
    """The status line as rich draws it: its text is worked out from the clock at every refresh."""

    progress: Progress
    clock: Clock = field(default=time.monotonic)

    def __rich__(self) -> Text:
        return Text(status_text(self.progress, self.clock()), style="cyan")


class RichDisplay:
    def __init__(self, console: Console, scripted: bool, clock: Clock = time.monotonic) -> None:
        self.console = console
        self.live: Any = None
        self.scripted = scripted
        self.clock = clock

    def status_line(self, progress: Progress) -> StatusLine:
        return StatusLine(progress, self.clock)

    def progress(self, progress: Progress) -> None:
        if self.live is not None:
            self.live.update(self.status_line(progress))

    def event(self, event: Event) -> None:
        view = live_view(event, self.scripted)
        if view is not None:
            self.console.print(view)
