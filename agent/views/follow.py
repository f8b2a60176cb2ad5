"""`agent show --follow RUN`: watch a run that another terminal is running.

It draws what the log holds as `agent show` does, then reads the events appended after that (through
agent.runlog.reader.EventTail, from exactly where the first read stopped) and draws each as the live display of
`agent run` does, with a status line of what the run's heartbeat says it is doing (a build's object
included). It stops when the run logs its end (`run_end`), when the run's process is gone without one
(killed), or on Ctrl-C (exit 130; the run goes on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from rich.console import Console
from rich.live import Live
from rich.text import Text

from agent.runlog.data import RunData, RunStatus, parse_time
from agent.runlog.events import Event, RunEndEvent
from agent.runlog.reader import EventTail, live_status
from agent.views.event import live_view
from agent.views.fmt import BAD_STYLE, DIM
from agent.views.live import clock_text
from agent.views.run import ShowOptions, render_run

POLL_S = 0.5
WallClock = Callable[[], datetime]


def now_here() -> datetime:
    return datetime.now().astimezone()


def follow_status_text(run_id: str, status: RunStatus, started: datetime | None, now: datetime) -> str:
    """`following RUN · compiling · ext: main.o · 2:13` (the run's wall time so far)."""
    parts = [f"following {run_id}", status.phase or status.state]
    if started is not None:
        parts.append(clock_text((now - started).total_seconds()))
    return " · ".join(parts)


@dataclass(frozen=True)
class FollowLine:
    """The follower's status line, worked out from the clock at every refresh (it ticks between events)."""

    run_id: str
    status: RunStatus
    started: datetime | None
    clock: WallClock = field(default=now_here)

    def __rich__(self) -> Text:
        return Text(follow_status_text(self.run_id, self.status, self.started, self.clock()), style="cyan")


def end_text(event: RunEndEvent) -> Text:
    return Text.assemble(("run ended", "bold"), f": {event.exit_status}: {event.message}")


def shown(event: Event, trajectory: int | None) -> bool:
    return trajectory is None or event.trajectory in (None, trajectory)


@dataclass
class Follower:
    """Reads a run's new events and prints them; `step()` once per poll says whether to go on."""

    run: RunData
    tail: EventTail
    console: Console
    trajectory: int | None = None
    notes: list[str] = field(default_factory=list)
    ended: RunEndEvent | None = None

    def print_new(self) -> None:
        for event in self.tail.read(self.notes):
            if isinstance(event, RunEndEvent):
                self.ended = event
                self.console.print(end_text(event), soft_wrap=True)
                return
            view = live_view(event, self.run.scripted) if shown(event, self.trajectory) else None
            if view is not None:
                self.console.print(view)

    def step(self) -> RunStatus | None:
        """Print what is new; the writer's status while it goes on, None once the run has ended or died."""
        self.print_new()
        if self.ended is not None:
            return None
        status = live_status(self.run.path)
        if status.state == "running":
            return status
        self.print_new()  # what it wrote between the read and its exit
        if self.ended is None:
            self.console.print(gone_text(status))
        return None


def gone_text(status: RunStatus) -> Text:
    if status.state == "finished":
        return Text(f"the run has ended ({status.exit_status})", style="bold")
    return Text(
        "the run's process is gone and its log has no end (killed?); stopped following", style=BAD_STYLE
    )


def follow(
    run: RunData,
    tail: EventTail,
    console: Console,
    opts: ShowOptions,
    *,
    poll_s: float = POLL_S,
    clock: WallClock = now_here,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """`run` was loaded through `tail`: show it, then follow it. Exit 0 when the run ends (or is not
    running), 130 on Ctrl-C."""
    console.print(render_run(run, opts))
    status = live_status(run.path)
    if status.state != "running":
        console.print(gone_text(status) if status.state == "killed" else Text(
            f"the run is not running ({status.label}): nothing to follow", style=DIM
        ))  # fmt: skip
        return 0
    follower = Follower(run, tail, console, opts.trajectory)
    started = parse_time(run.info.started_at)
    try:
        console.print(
            Text(f"following {run.run_id} (Ctrl-C stops following; the run goes on)", style=DIM),
            soft_wrap=True,
        )
        with Live(FollowLine(run.run_id, status, started, clock), console=console, transient=True) as live:
            while (status_now := follower.step()) is not None:
                live.update(FollowLine(run.run_id, status_now, started, clock))
                sleep(poll_s)
    except KeyboardInterrupt:
        console.print(Text("stopped following; the run goes on", style=DIM))
        return 130
    for note in follower.notes:
        console.print(Text(f"note: {note}", style=DIM))
    return 0
