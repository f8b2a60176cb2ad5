"""A run as typed data: its events grouped into turns, trajectories and lease spans, and its totals
(from summary.json, else summed over the turns). Built by `agent.runlog.reader.load_run`; read by the views."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from agent import exits
from agent.runlog.events import (
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
    TimedKernel,
    ToolCallEvent,
    TrajectoryEvent,
    TurnEndEvent,
    Usage,
)


class ToolUseBlock(BaseModel):
    """A `tool_use` block of a model call's raw content: what the model asked to run."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = {}

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
        """How the run stands, in a word and its exit status: `finished`, `stopped (TurnLimit)`,
        `failed (ModelError)`, `running (compiling)`, `killed`."""
        if self.state == "finished":
            if self.exit_status == "Finished":
                return "finished"  # not "finished (Finished)"
            return f"{ending_word(self.exit_status)} ({self.exit_status})"
        if self.state == "running" and self.phase:
            return f"running ({self.phase})"
        return self.state

    @property
    def failed(self) -> bool:
        return self.exit_status in FAILED_STATUSES


STOPPED_STATUSES = frozenset(
    c.__name__ for c in (exits.TurnLimit, exits.CostLimit, exits.TimeLimit, exits.Interrupted)
)
FAILED_STATUSES = frozenset(c.__name__ for c in (exits.ModelError, exits.Refused, exits.ContextExhausted))
"""agent.exits' statuses of a run that a limit or Ctrl-C stopped, and of one the model's side ended."""


def ending_word(exit_status: str | None) -> str:
    if exit_status in STOPPED_STATUSES:
        return "stopped"
    if exit_status in FAILED_STATUSES:
        return "failed"
    return "finished"  # Finished, TargetReached, and the statuses of older logs


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
    def recheck_seconds(self) -> float:
        """The final re-check's seconds (after the last turn; a log from before the summary kept them:
        its re-check calls' own)."""
        if self.summary and self.summary.recheck_seconds:
            return self.summary.recheck_seconds
        return sum(c.seconds for t in self.turns for c in t.tool_calls if c.name == "final_recheck")

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
        start = parse_time(self.info.started_at)
        ends = [t for t in (parse_time(s) for s in stamps) if t is not None]
        if start is None or not ends:
            return None
        return max(0.0, (max(ends) - start).total_seconds())

    @property
    def best_events(self) -> list[BestEvent]:
        return [e for e in self.events if isinstance(e, BestEvent)]

    @property
    def _best_withdrawn(self) -> bool:
        """An ended run without best.json: its final re-check (or the red team's re-judge) withdrew the best
        its events name, so none of them is the run's best."""
        return self.summary is not None and self.best is None

    @property
    def best_speedup(self) -> float | None:
        if self.summary and self.summary.best_speedup is not None:
            return self.summary.best_speedup
        if self.best:
            return self.best.speedup
        if self._best_withdrawn:
            return None
        return max((e.speedup for e in self.best_events), default=None)

    @property
    def best_kernel(self) -> TimedKernel | None:
        """The best as recorded (best.json, else, in a run still going, the last best event): its headline
        and eager speedup."""
        if self.best:
            return self.best
        events = [] if self._best_withdrawn else self.best_events
        return events[-1] if events else None

    @property
    def best_kernel_path(self) -> str | None:
        """The winning candidate's own file (e.g. kernels/004.py)."""
        best = self.best_kernel
        return best.kernel_path if best else None

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
        start = parse_time(a.timestamp)
        end = parse_time(released[lease_id].timestamp) if lease_id in released else None
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


def parse_time(stamp: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None
