"""Read a run directory back into typed records: `load_run(path)` and `list_runs(runs_dir)`; its events
alone with `read_events` (the one reader of events.jsonl), or as they are appended with `EventTail`.

Everything is read through the models of `agent.runlog.events`; a run killed mid-write (a truncated last line
of `events.jsonl`, no `summary.json`, a stale heartbeat) still loads. A path that is not a run, or a run
written by an unknown format version, raises `RunReadError` with a message meant for the user.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from agent.runlog.data import RunData, RunStatus, parse_time
from agent.runlog.events import (
    READABLE_FORMAT_VERSIONS,
    BestEvent,
    BestRecord,
    Event,
    Heartbeat,
    RunEndEvent,
    RunInfo,
    RunSummary,
    ToolCallEvent,
    Versioned,
    parse_event,
)

M = TypeVar("M", bound=BaseModel)

HEARTBEAT_STALE_SECONDS = 60.0
"""A heartbeat older than this (it is rewritten every few seconds) means the writer is gone."""


def read_events(run_dir: Path, notes: list[str] | None = None) -> list[Event]:
    """Every event of a run that parses, in log order: the one reader of events.jsonl. A torn last line
    (the process was killed mid-write) or an unreadable middle one is skipped, and said in `notes`."""
    notes = [] if notes is None else notes
    path = run_dir / "events.jsonl"
    if not path.is_file():
        notes.append("events.jsonl is missing: the run wrote no events")
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    return parse_lines(lines, 1, notes, last_may_be_torn=True)


def parse_lines(lines: list[str], first: int, notes: list[str], last_may_be_torn: bool) -> list[Event]:
    """Lines of events.jsonl (numbered from `first`) as events; what does not parse is said in `notes`."""
    events: list[Event] = []
    for number, line in enumerate(lines, start=first):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ValidationError as exc:
            if last_may_be_torn and number == first + len(lines) - 1:
                notes.append(f"events.jsonl line {number} is truncated (the writer was cut off); ignored")
            else:
                notes.append(f"events.jsonl line {number} is unreadable ({first_error(exc)}); skipped")
    return events


class EventTail:
    """A run's events as they are appended, for following a live run: each `read()` returns the events of
    the lines completed since the last one (a line still being written waits for its newline)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "events.jsonl"
        self.offset = 0  # bytes of whole lines read so far
        self.lines = 0

    def read(self, notes: list[str] | None = None) -> list[Event]:
        notes = [] if notes is None else notes
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        if not whole:
            return []
        self.offset += len(whole)
        lines = whole.decode("utf-8", errors="replace").splitlines()
        events = parse_lines(lines, self.lines + 1, notes, last_may_be_torn=False)
        self.lines += len(lines)
        return events


def first_error(exc: ValidationError) -> str:
    """A validation error in one line: where, then what."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


class RunReadError(Exception):
    """A path that cannot be shown as a run; the message says why, in words."""


def _read_info(path: Path) -> RunInfo:
    run_json = path / "run.json"
    if not path.exists():
        raise RunReadError(f"{path}: no such run directory")
    if not path.is_dir() or not run_json.is_file():
        raise RunReadError(f"{path} is not a run (no run.json)")
    text = run_json.read_text(encoding="utf-8")
    try:
        version = Versioned.model_validate_json(text).format_version
    except ValidationError as exc:
        raise RunReadError(f"{run_json} is not a run record ({first_error(exc)})") from exc
    if version not in READABLE_FORMAT_VERSIONS:
        raise RunReadError(
            f"{path} was written by format version {version}; this agent reads "
            f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}"
        )
    try:
        return RunInfo.model_validate_json(text)
    except ValidationError as exc:
        raise RunReadError(f"{run_json} is not a run record ({first_error(exc)})") from exc


def _read_optional(path: Path, model: type[M], notes: list[str]) -> M | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    try:
        version = Versioned.model_validate_json(text).format_version
        if version not in READABLE_FORMAT_VERSIONS:
            notes.append(f"{path.name} was written by format version {version}; ignored")
            return None
        return model.model_validate_json(text)
    except ValidationError as exc:
        notes.append(f"{path.name} is unreadable ({first_error(exc)}); ignored")
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def derive_status(
    summary: RunSummary | None,
    run_end: RunEndEvent | None,
    heartbeat: Heartbeat | None,
    now: datetime,
    host: str,
) -> RunStatus:
    """finished (summary or run_end written), running (fresh heartbeat and live pid), else killed.

    A heartbeat from another host is judged by its age alone: its pid cannot be checked from here.
    Its age counts either way, so a writer's clock skewed a little ahead still reads as fresh.
    """
    if summary:
        return RunStatus("finished", summary.exit_status)
    if run_end:
        return RunStatus("finished", run_end.exit_status)
    if heartbeat:
        beat = parse_time(heartbeat.updated_at)
        fresh = beat is not None and abs((now - beat).total_seconds()) <= HEARTBEAT_STALE_SECONDS
        alive = heartbeat.host != host or _pid_alive(heartbeat.pid)
        if fresh and alive:
            return RunStatus("running", phase=heartbeat.phase or None)
    return RunStatus("killed")


def live_status(path: Path, now: datetime | None = None) -> RunStatus:
    """Whether a run's process is writing it now, from its files as they are at this moment: `finished`
    once summary.json is there, `running` while the heartbeat is fresh (or, before the first beat, while
    run.json is new), else `killed`. For a follower, which must not take an earlier session's `run_end`
    (a resumed run) for the end."""
    notes: list[str] = []
    summary = _read_optional(path / "summary.json", RunSummary, notes)
    heartbeat = _read_optional(path / "heartbeat.json", Heartbeat, notes)
    clock = now or datetime.now().astimezone()
    if summary is None and heartbeat is None:
        with contextlib.suppress(OSError):
            age = clock.timestamp() - (path / "run.json").stat().st_mtime
            if age <= HEARTBEAT_STALE_SECONDS:
                return RunStatus("running", phase="starting")
    return derive_status(summary, None, heartbeat, clock, socket.gethostname())


def _read_kernels(path: Path, events: list[Event], best: BestRecord | None) -> dict[str, str]:
    names = [e.kernel_path for e in events if isinstance(e, ToolCallEvent) and e.kernel_path]
    names += [e.kernel_path for e in events if isinstance(e, BestEvent)]
    if best:
        names.append(best.kernel_path)
    names.append("best.py")
    kernels: dict[str, str] = {}
    for name in dict.fromkeys(names):
        file = path / name
        if file.is_file() and file.resolve().is_relative_to(path.resolve()):
            kernels[name] = file.read_text(encoding="utf-8", errors="replace")
    return kernels


def load_run(path: Path | str, now: datetime | None = None, tail: EventTail | None = None) -> RunData:
    """Read one run directory (or its run.json). `now` fixes the clock for the running/killed call.
    `tail`: read the events through it (a follower then reads on from exactly where this stopped)."""
    path = Path(path)
    if path.name == "run.json" and path.is_file():
        path = path.parent
    info = _read_info(path)
    notes: list[str] = []
    events = tail.read(notes) if tail is not None else read_events(path, notes)
    summary = _read_optional(path / "summary.json", RunSummary, notes)
    heartbeat = _read_optional(path / "heartbeat.json", Heartbeat, notes)
    best = _read_optional(path / "best.json", BestRecord, notes)
    run_end = next((e for e in reversed(events) if isinstance(e, RunEndEvent)), None)
    clock = now or datetime.now().astimezone()
    status = derive_status(summary, run_end, heartbeat, clock, socket.gethostname())
    return RunData(
        path=path,
        info=info,
        events=events,
        summary=summary,
        heartbeat=heartbeat,
        best=best,
        status=status,
        kernels=_read_kernels(path, events, best),
        notes=notes,
    )


@dataclass(frozen=True)
class RunListing:
    """One entry of `list_runs`: the loaded run, or why the directory could not be read."""

    path: Path
    run: RunData | None = None
    error: str | None = None


def list_runs(runs_dir: Path | str, now: datetime | None = None) -> list[RunListing]:
    """Every run directory under `runs_dir`, newest first (by start time; an unreadable one by mtime)."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise RunReadError(f"{runs_dir}: no such runs directory")
    listings: list[RunListing] = []
    for child in sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / "run.json").exists()):
        try:
            listings.append(RunListing(child, run=load_run(child, now=now)))
        except RunReadError as exc:
            listings.append(RunListing(child, error=str(exc)))

    def key(listing: RunListing) -> tuple[datetime, str]:
        started = parse_time(listing.run.info.started_at) if listing.run else None
        if started is None:
            started = datetime.fromtimestamp((listing.path / "run.json").stat().st_mtime).astimezone()
        return (started, listing.path.name)

    return sorted(listings, key=key, reverse=True)


def default_runs_dir() -> str:
    """Where runs are written and looked for unless a command says: $KERNEL_AGENT_RUNS, else ./runs."""
    return os.environ.get("KERNEL_AGENT_RUNS") or "runs"


def resolve_run(arg: str, runs_dir: Path | str | None = None) -> Path:
    """A run given as a path, or as a directory name under `runs_dir` (default: `default_runs_dir()`)."""
    path = Path(arg)
    if path.exists():
        return path
    candidate = Path(runs_dir if runs_dir is not None else default_runs_dir()) / arg
    if candidate.exists():
        return candidate
    raise RunReadError(f"{arg}: no such run directory (nor {candidate})")
