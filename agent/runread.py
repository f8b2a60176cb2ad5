"""Read a run directory back into typed records: `load_run(path)` and `list_runs(runs_dir)`.

Everything is read through the models of `agent.events`; a run killed mid-write (a truncated last line
of `events.jsonl`, no `summary.json`, a stale heartbeat) still loads. A path that is not a run, or a run
written by an unknown format version, raises `RunReadError` with a message meant for the user.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agent.events import (
    FORMAT_VERSION,
    READABLE_FORMAT_VERSIONS,
    BestEvent,
    BestRecord,
    ErrorEvent,
    Event,
    Heartbeat,
    LeaseEvent,
    ModelCallEvent,
    RunEndEvent,
    RunInfo,
    RunSummary,
    ToolCallEvent,
    TrajectoryEvent,
    TurnEndEvent,
    Usage,
    parse_event,
)

M = TypeVar("M", bound=BaseModel)

HEARTBEAT_STALE_SECONDS = 60.0
"""A heartbeat older than this (it is rewritten every few seconds) means the writer is gone."""


class RunReadError(Exception):
    """A path that cannot be shown as a run; the message says why, in words."""


class _Versioned(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format_version: int = FORMAT_VERSION


class ToolUseBlock(BaseModel):
    """A `tool_use` block of a model call's raw content: what the model asked to run."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = {}

    @property
    def kernel_path(self) -> str | None:
        path = self.input.get("kernel_path")
        return path if isinstance(path, str) else None

    @property
    def kernel_code(self) -> str | None:
        code = self.input.get("kernel_code")
        return code if isinstance(code, str) else None


def tool_uses(call: ModelCallEvent) -> list[ToolUseBlock]:
    blocks: list[ToolUseBlock] = []
    for block in call.content:
        try:
            blocks.append(ToolUseBlock.model_validate(block))
        except ValidationError:
            continue
    return blocks


@dataclass(frozen=True)
class RunStatus:
    state: Literal["running", "finished", "killed"]
    exit_status: str | None = None
    phase: str | None = None
    """What a running run's heartbeat says it is doing (compiling, benchmarking, ...)."""

    @property
    def label(self) -> str:
        if self.state == "finished":
            return f"finished ({self.exit_status})"
        if self.state == "running" and self.phase:
            return f"running ({self.phase})"
        return self.state


@dataclass(frozen=True)
class TurnData:
    """The events of one turn, in log order; `end` is missing for a turn cut short by a kill.
    In a parallel run turns are numbered per trajectory; `trajectory` is None for run-level events
    that carry a turn (the final re-check)."""

    turn: int
    events: list[Event]
    end: TurnEndEvent | None
    trajectory: int | None = None

    @property
    def model_calls(self) -> list[ModelCallEvent]:
        return [e for e in self.events if isinstance(e, ModelCallEvent)]

    @property
    def tool_calls(self) -> list[ToolCallEvent]:
        return [e for e in self.events if isinstance(e, ToolCallEvent)]

    @property
    def unanswered(self) -> list[ToolUseBlock]:
        """Calls the model asked for that have no logged result (the run stopped before it came)."""
        answered = {c.tool_use_id for c in self.tool_calls}
        return [b for c in self.model_calls for b in tool_uses(c) if b.id not in answered]

    @property
    def complete(self) -> bool:
        return self.end is not None

    @property
    def llm_seconds(self) -> float:
        return self.end.llm_seconds if self.end else sum(c.seconds for c in self.model_calls)

    @property
    def tool_seconds(self) -> float:
        return self.end.tool_seconds if self.end else sum(c.seconds for c in self.tool_calls)

    @property
    def turn_seconds(self) -> float:
        return self.end.turn_seconds if self.end else self.llm_seconds + self.tool_seconds

    @property
    def usage(self) -> Usage:
        if self.end:
            return self.end.usage
        return sum((c.usage for c in self.model_calls), Usage())

    @property
    def cost_usd(self) -> float:
        return self.end.cost_usd if self.end else sum(c.cost_usd for c in self.model_calls)


@dataclass(frozen=True)
class RunData:
    path: Path
    info: RunInfo
    events: list[Event]
    summary: RunSummary | None
    heartbeat: Heartbeat | None
    best: BestRecord | None
    status: RunStatus
    kernels: dict[str, str] = field(default_factory=dict)
    """Kernel sources by path relative to the run dir (every `kernel_path` the log names, and best.py)."""
    notes: list[str] = field(default_factory=list)
    """What could not be read (a truncated last line, an unreadable record), for the viewer to say."""

    @property
    def run_id(self) -> str:
        return self.info.run_id

    @property
    def scripted(self) -> bool:
        return self.info.scripted

    @property
    def turns(self) -> list[TurnData]:
        return group_turns(self.events)

    @property
    def usage(self) -> Usage:
        if self.summary:
            return self.summary.usage
        return sum((t.usage for t in self.turns), Usage())

    @property
    def cost_usd(self) -> float:
        return self.summary.cost_usd if self.summary else sum(t.cost_usd for t in self.turns)

    @property
    def llm_seconds(self) -> float:
        return self.summary.llm_seconds if self.summary else sum(t.llm_seconds for t in self.turns)

    @property
    def tool_seconds(self) -> float:
        return self.summary.tool_seconds if self.summary else sum(t.tool_seconds for t in self.turns)

    @property
    def turn_count(self) -> int:
        if self.summary:
            return self.summary.turns
        return max((t.turn for t in self.turns), default=0)

    @property
    def wall_seconds(self) -> float | None:
        """From start to the summary's figure, else to the last sign of life (event or heartbeat)."""
        if self.summary:
            return self.summary.wall_seconds
        stamps = [e.timestamp for e in self.events]
        if self.heartbeat:
            stamps.append(self.heartbeat.updated_at)
        start = _parse_time(self.info.started_at)
        ends = [t for t in (_parse_time(s) for s in stamps) if t is not None]
        if start is None or not ends:
            return None
        return max(0.0, (max(ends) - start).total_seconds())

    @property
    def best_events(self) -> list[BestEvent]:
        return [e for e in self.events if isinstance(e, BestEvent)]

    @property
    def best_speedup(self) -> float | None:
        if self.summary and self.summary.best_speedup is not None:
            return self.summary.best_speedup
        if self.best:
            return self.best.speedup
        return max((e.speedup for e in self.best_events), default=None)

    @property
    def best_kernel_path(self) -> str | None:
        """The winning candidate's own file (e.g. kernels/004.py)."""
        if self.best:
            return self.best.kernel_path
        events = self.best_events
        return events[-1].kernel_path if events else None

    @property
    def parallel(self) -> bool:
        """Written by `agent run --parallel` (or through an executor): events carry a trajectory."""
        return any(e.trajectory is not None for e in self.events)

    @property
    def trajectories(self) -> list[TrajectoryData]:
        return group_trajectories(self.events)

    @property
    def leases(self) -> list[LeaseSpan]:
        return lease_spans(self.events)

    @property
    def errors(self) -> list[ErrorEvent]:
        return [e for e in self.events if isinstance(e, ErrorEvent)]

    @property
    def run_end(self) -> RunEndEvent | None:
        return next((e for e in reversed(self.events) if isinstance(e, RunEndEvent)), None)


def group_turns(events: list[Event]) -> list[TurnData]:
    """Events that carry a turn, grouped by trajectory and turn (ascending; run-level ones last)."""
    by_turn: dict[tuple[int | None, int], list[Event]] = {}
    for event in events:
        turn = getattr(event, "turn", None)
        if turn is not None:
            by_turn.setdefault((event.trajectory, turn), []).append(event)

    def order(key: tuple[int | None, int]) -> tuple[bool, int, int]:
        return (key[0] is None, key[0] or 0, key[1])  # a parallel run's re-check after its trajectories

    return [
        TurnData(
            turn=n, events=evs, end=next((e for e in evs if isinstance(e, TurnEndEvent)), None), trajectory=t
        )
        for (t, n), evs in sorted(by_turn.items(), key=lambda kv: order(kv[0]))
    ]


@dataclass(frozen=True)
class TrajectoryData:
    """One trajectory of a parallel run: how it started and ended, and its turns."""

    number: int
    kind: str
    from_kernel: str | None
    exit_status: str | None
    turns: list[TurnData]

    @property
    def benchmarks(self) -> list[ToolCallEvent]:
        return [c for t in self.turns for c in t.tool_calls if c.name == "benchmark"]

    @property
    def best_speedup(self) -> float | None:
        speedups = [c.result.get("speedup") for c in self.benchmarks if c.status == "ok"]
        return max((s for s in speedups if isinstance(s, int | float)), default=None)


def group_trajectories(events: list[Event]) -> list[TrajectoryData]:
    numbers = sorted({e.trajectory for e in events if e.trajectory is not None})
    turns = group_turns(events)
    found = []
    for number in numbers:
        marks = [e for e in events if isinstance(e, TrajectoryEvent) and e.trajectory == number]
        start = next((m for m in marks if m.action == "started"), None)
        end = next((m for m in marks if m.action == "ended"), None)
        found.append(
            TrajectoryData(
                number=number,
                kind=start.kind if start else "sample",
                from_kernel=start.from_kernel if start else None,
                exit_status=end.exit_status if end else None,
                turns=[t for t in turns if t.trajectory == number],
            )
        )
    return found


@dataclass(frozen=True)
class LeaseSpan:
    """One lease from its acquired event to its released one (`released` None: still held, or killed)."""

    lease_id: str
    kind: str
    resource: str
    trajectory: int | None
    acquired: datetime
    released: datetime | None


def lease_spans(events: list[Event]) -> list[LeaseSpan]:
    acquired: dict[str, LeaseEvent] = {}
    released: dict[str, LeaseEvent] = {}
    for e in events:
        if isinstance(e, LeaseEvent):
            (acquired if e.action == "acquired" else released)[e.lease_id] = e
    spans = []
    for lease_id, a in acquired.items():
        start = _parse_time(a.timestamp)
        end = _parse_time(released[lease_id].timestamp) if lease_id in released else None
        if start is not None:
            spans.append(LeaseSpan(lease_id, a.kind, a.resource, a.trajectory, start, end))
    return sorted(spans, key=lambda s: s.acquired)


def overlapping_leases(spans: list[LeaseSpan], cpu_problem: bool) -> list[tuple[LeaseSpan, LeaseSpan]]:
    """Pairs of leases that must not overlap but do: two timings of one resource, and on a CPU problem
    a timing and a compile (a timing shares its host with nothing)."""
    bad = []
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            same_gpu = a.kind == b.kind == "timing" and a.resource == b.resource
            host_clock = cpu_problem and "timing" in (a.kind, b.kind)
            if (same_gpu or host_clock) and _overlap(a, b):
                bad.append((a, b))
    return bad


def _overlap(a: LeaseSpan, b: LeaseSpan) -> bool:
    far = datetime.max.replace(tzinfo=a.acquired.tzinfo)
    return a.acquired < (b.released or far) and b.acquired < (a.released or far)


def _parse_time(stamp: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else err["msg"]


def _read_info(path: Path) -> RunInfo:
    run_json = path / "run.json"
    if not path.exists():
        raise RunReadError(f"{path}: no such run directory")
    if not path.is_dir() or not run_json.is_file():
        raise RunReadError(f"{path} is not a run (no run.json)")
    text = run_json.read_text(encoding="utf-8")
    try:
        version = _Versioned.model_validate_json(text).format_version
    except ValidationError as exc:
        raise RunReadError(f"{run_json} is not a run record ({_first_error(exc)})") from exc
    if version not in READABLE_FORMAT_VERSIONS:
        raise RunReadError(
            f"{path} was written by format version {version}; this agent reads "
            f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}"
        )
    try:
        return RunInfo.model_validate_json(text)
    except ValidationError as exc:
        raise RunReadError(f"{run_json} is not a run record ({_first_error(exc)})") from exc


def _read_events(path: Path, notes: list[str]) -> list[Event]:
    events_file = path / "events.jsonl"
    if not events_file.is_file():
        notes.append("events.jsonl is missing: the run wrote no events")
        return []
    lines = events_file.read_text(encoding="utf-8", errors="replace").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    events: list[Event] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ValidationError as exc:
            if number == len(lines):
                notes.append(f"events.jsonl line {number} is truncated (the writer was cut off); ignored")
            else:
                notes.append(f"events.jsonl line {number} is unreadable ({_first_error(exc)}); skipped")
    return events


def _read_optional(path: Path, model: type[M], notes: list[str]) -> M | None:
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    try:
        version = _Versioned.model_validate_json(text).format_version
        if version not in READABLE_FORMAT_VERSIONS:
            notes.append(f"{path.name} was written by format version {version}; ignored")
            return None
        return model.model_validate_json(text)
    except ValidationError as exc:
        notes.append(f"{path.name} is unreadable ({_first_error(exc)}); ignored")
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
        beat = _parse_time(heartbeat.updated_at)
        fresh = beat is not None and abs((now - beat).total_seconds()) <= HEARTBEAT_STALE_SECONDS
        alive = heartbeat.host != host or _pid_alive(heartbeat.pid)
        if fresh and alive:
            return RunStatus("running", phase=heartbeat.phase or None)
    return RunStatus("killed")


def _read_kernels(path: Path, events: list[Event], best: BestRecord | None) -> dict[str, str]:
    names = [e.kernel_path for e in events if isinstance(e, ToolCallEvent) and e.kernel_path]
    names += [e.kernel_path for e in events if isinstance(e, BestEvent)]
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    names += [b.kernel_path for c in calls for b in tool_uses(c) if b.kernel_path]
    if best:
        names.append(best.kernel_path)
    names.append("best.py")
    kernels: dict[str, str] = {}
    for name in dict.fromkeys(names):
        file = path / name
        if file.is_file() and file.resolve().is_relative_to(path.resolve()):
            kernels[name] = file.read_text(encoding="utf-8", errors="replace")
    return kernels


def load_run(path: Path | str, now: datetime | None = None) -> RunData:
    """Read one run directory (or its run.json). `now` fixes the clock for the running/killed call."""
    path = Path(path)
    if path.name == "run.json" and path.is_file():
        path = path.parent
    info = _read_info(path)
    notes: list[str] = []
    events = _read_events(path, notes)
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
        started = _parse_time(listing.run.info.started_at) if listing.run else None
        if started is None:
            started = datetime.fromtimestamp((listing.path / "run.json").stat().st_mtime).astimezone()
        return (started, listing.path.name)

    return sorted(listings, key=key, reverse=True)


def resolve_run(arg: str, runs_dir: Path | str = "runs") -> Path:
    """A run given as a path, or as a directory name under `runs_dir`."""
    path = Path(arg)
    if path.exists():
        return path
    candidate = Path(runs_dir) / arg
    return candidate if candidate.exists() else path
