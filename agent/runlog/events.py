"""The run log's records: `run.json` (RunInfo), `events.jsonl` (one typed Event per line), `summary.json`.

Every event carries a `Literal` tag in `event` and is read back through the `Event` discriminated union,
so a viewer never guesses what a line is. Failures are recorded as data (`status`, `error`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tools.figure_data import HeadlineMetric
from tools.results import BaselineReport

FORMAT_VERSION = 2
"""2: events may carry a `trajectory` (parallel runs) and there are `lease` and `trajectory` events."""
READABLE_FORMAT_VERSIONS = (1, 2)  # a version-1 log is a version-2 log with one trajectory and no leases


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Usage(BaseModel):
    """Tokens of one model call (or a sum of them). `thinking_tokens` are part of `output_tokens`."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int = 0

    @property
    def tokens_in(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total(self) -> int:
        return self.tokens_in + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class BaseEvent(BaseModel):
    model_config = ConfigDict(extra="ignore")
    timestamp: str = Field(default_factory=utc_now)
    trajectory: int | None = Field(
        None, description="which trajectory of a parallel run (1-based); None: run-level"
    )


class ModelCallEvent(BaseEvent):
    event: Literal["model_call"] = "model_call"
    turn: int
    provider: str
    model: str
    seconds: float
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    stop_reason: str | None = None
    text: str = ""
    reasoning: str = ""
    content: list[dict[str, Any]] = Field(
        default_factory=list, description="raw assistant content blocks (thinking signatures included)"
    )
    status: Literal["ok", "error"] = "ok"
    error: str | None = None


class ToolCallEvent(BaseEvent):
    event: Literal["tool_call"] = "tool_call"
    turn: int
    tool_use_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict, description="kernel_code replaced by kernel_path")
    kernel_path: str | None = Field(None, description="relative to the run dir, e.g. kernels/003.py")
    status: str = Field(description="the tool result's status, e.g. ok / compile_error / incorrect")
    is_error: bool = False
    result: dict[str, Any] = Field(default_factory=dict, description="CompileResult or BenchResult dump")
    summary: str = Field("", description="the text given back to the model")
    seconds: float = 0.0


class TurnEndEvent(BaseEvent):
    event: Literal["turn_end"] = "turn_end"
    turn: int
    turn_seconds: float
    llm_seconds: float
    tool_seconds: float
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0


class TimedKernel(BaseModel):
    """A correct kernel as one benchmark timed it: the record the best is kept as, everywhere (the loop's
    best and re-check candidates, the best event, best.json)."""

    turn: int
    kernel_path: str = Field(description="the candidate's own file under kernels/, relative to the run dir")
    speedup: float = Field(
        description="vs the launch-free reference (geomean over shapes); older logs: eager"
    )
    median_ms: float = Field(description="its median at the primary timed shape")
    rse: float = Field(description="that median's relative standard error")
    floor_ms: float | None = Field(None, description="the primary shape's speed-of-light floor, where known")
    eager_speedup: float | None = Field(None, description="vs the eager reference (None: an older log)")
    headline_metric: HeadlineMetric | None = Field(None, description="what ranks it (None: an older log)")
    headline: float | None = Field(None, description="its value: geomean over the timing shapes")

    @property
    def floor_fraction(self) -> float | None:
        """The headline where it is the share of the floor; an older log's: the primary shape's."""
        if self.headline_metric == "floor_fraction":
            return self.headline
        return self.floor_ms / self.median_ms if self.floor_ms is not None and self.median_ms > 0 else None

    @property
    def rank(self) -> float:
        """What ranks it against other kernels (higher is better): the headline, else the speedup."""
        return self.headline if self.headline is not None else self.speedup


class _BestTag(BaseEvent):  # the tag before the kernel's fields, as the log has always had it
    event: Literal["best"] = "best"


class BestEvent(TimedKernel, _BestTag):
    """A new best kernel (or the winner of the final re-check when `final` is set)."""

    final: bool = False


class ErrorEvent(BaseEvent):
    event: Literal["error"] = "error"
    turn: int | None = None
    where: str
    message: str


class LeaseEvent(BaseEvent):
    """A lease taken or given back: `compile` (a CPU slot; on CPU problems shared with other compiles),
    `timing` (exclusive: one GPU, or the whole host on CPU problems) or `evaluation` (one of the evaluations
    a GPU with warm workers takes at once, whose timed loops are its `timing` leases). Acquired is logged once held,
    released just before it is given back, so two leases of one resource never overlap in the log."""

    event: Literal["lease"] = "lease"
    action: Literal["acquired", "released"]
    lease_id: str
    kind: Literal["compile", "timing", "evaluation"]
    resource: str = Field(description="cpu, host, gpu0, ... or ray:<node>:gpu0 for a Ray task")
    kernel_path: str | None = None
    waited_s: float | None = Field(None, description="acquired: how long it waited for the lease")
    held_s: float | None = Field(None, description="released: how long it was held")


class TrajectoryEvent(BaseEvent):
    """A trajectory of a parallel run starting or ending. A `branch` starts from the shared best kernel."""

    event: Literal["trajectory"] = "trajectory"
    action: Literal["started", "ended"]
    kind: Literal["sample", "branch"] = "sample"
    from_kernel: str | None = Field(None, description="branch: the best kernel it starts from")
    exit_status: str | None = None
    message: str = ""


class AttackEvent(BaseEvent):
    """Red team (`agent redteam`): the attack a candidate names in its `# attack: <name>: <line>` comment,
    recorded after the tool call that ran it ("unnamed" where it names none)."""

    event: Literal["attack"] = "attack"
    turn: int
    kernel_path: str
    name: str
    description: str = ""


class RejudgeEvent(BaseEvent):
    """Red team: one candidate's first verdict beside its stricter one (agent/redteam/rejudge.py).
    `outcome`: `caught` (the first judgement rejected it), `caught on re-judge` (accepted first, rejected by
    the stricter checks: a regression case was written to `case_dir`), `escaped` (accepted by both),
    `harness error` (the evaluator itself failed on it: no verdict, a finding about the harness)."""

    event: Literal["rejudge"] = "rejudge"
    candidate_turn: int = Field(description="the turn that benchmarked it (the event itself is run-level)")
    kernel_path: str
    attack: str
    first_status: str
    first_flags: list[str] = Field(default_factory=list)
    first_speedup: float | None = None
    strict_status: str | None = Field(None, description="None: not re-judged (the first verdict rejected it)")
    strict_flags: list[str] = Field(default_factory=list)
    caught_by: str = Field("", description="which check rejected it, in words")
    outcome: Literal["caught", "caught on re-judge", "escaped", "harness error"]
    case_dir: str | None = Field(None, description="the regression case, relative to the run dir")
    seconds: float = 0.0


class RunEndEvent(BaseEvent):
    event: Literal["run_end"] = "run_end"
    exit_status: str
    message: str = ""


Event = Annotated[
    ModelCallEvent
    | ToolCallEvent
    | TurnEndEvent
    | BestEvent
    | ErrorEvent
    | LeaseEvent
    | TrajectoryEvent
    | AttackEvent
    | RejudgeEvent
    | RunEndEvent,
    Field(discriminator="event"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    return EVENT_ADAPTER.validate_json(line)


class Versioned(BaseModel):
    """A record file (run.json, summary.json, best.json): the format it was written in comes first."""

    model_config = ConfigDict(extra="ignore")
    format_version: int = FORMAT_VERSION


class ParallelLimit(BaseModel):
    """One resource's cap on the trajectories a run takes at once (agent/execution/capacity.py)."""

    resource: Literal["cores", "host", "gpus", "gpu_memory", "truth"]
    most: int
    why: str


class ParallelChoice(BaseModel):
    """How many trajectories a run takes at once: `--parallel` as asked (a number, or `auto`), what each
    resource of this machine can hold, and what ran."""

    asked: int | Literal["auto"]
    chose: int
    limits: list[ParallelLimit] = Field(default_factory=list)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    problem_path: str
    provider: str
    model: str
    max_turns: int | None = None
    max_cost_usd: float | None = None
    max_minutes: float | None = None
    target_speedup: float | None = None
    stop_at_floor: float | None = Field(
        None, description="end once the best reaches this fraction of the floor"
    )
    trajectory: str | None = None
    parallel: int = Field(1, description="trajectories at once")
    parallel_choice: ParallelChoice | None = Field(None, description="why that many (--parallel auto, a cap)")
    branches: int = Field(0, description="trajectories started from the shared best once one exists")
    gpus: list[int] | None = Field(None, description="local GPUs used (None: all visible)")
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    base_url: str | None = Field(
        None, description="an OpenAI-compatible run's server, without credentials or query (resume uses it)"
    )
    baselines: bool = Field(False, description="the best timed against the baselines at the end")
    sanitize: Literal["auto", "on", "off"] = Field(
        "off", description="new bests sanitized before they count: auto = where the sanitizer runs here"
    )
    mode: Literal["run", "redteam"] = Field(
        "run", description="redteam: `agent redteam`, the model attacks the evaluator (agent/redteam/)"
    )


class RunEnvironment(BaseModel):
    model_config = ConfigDict(extra="ignore")
    host: str = ""
    gpu: str | None = None
    driver: str | None = None
    torch: str = ""
    cuda: str | None = None
    python: str = ""
    harness_sha: str = ""


class RunInfo(Versioned):
    """`run.json`, written once when the run starts."""

    run_id: str
    started_at: str = Field(default_factory=utc_now)
    problem: str
    problem_hash: str
    provider: str
    model: str
    scripted: bool = False
    config: RunConfig
    environment: RunEnvironment = Field(default_factory=RunEnvironment)


class RunSummary(Versioned):
    """`summary.json`, written when the run ends (a killed run has none; its heartbeat goes stale)."""

    exit_status: str
    message: str = ""
    turns: int
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    wall_seconds: float
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    recheck_seconds: float = Field(0.0, description="the final re-check's, after the last turn")
    best_speedup: float | None = Field(None, description="vs the launch-free reference (older logs: eager)")
    best_floor_fraction: float | None = Field(
        None, description="the re-checked best: floor ms / its median ms (geomean over the shapes)"
    )
    best_eager_speedup: float | None = None
    best_headline_metric: HeadlineMetric | None = Field(None, description="what ranked the run's kernels")
    best_kernel: str | None = Field(None, description="relative path, e.g. best.py")
    baselines: BaselineReport | None = Field(None, description="--baselines: the best against each baseline")
    scripted: bool = False
    ended_at: str = Field(default_factory=utc_now)


class BestRecord(TimedKernel, Versioned):
    """`best.json`, beside `best.py`: the fastest correct kernel so far (after the run: the re-check winner)."""

    final: bool = False
    bench: dict[str, Any] = Field(default_factory=dict, description="the BenchResult that chose it")


class Heartbeat(BaseModel):
    """`heartbeat.json`, rewritten every few seconds while the run's process lives."""

    model_config = ConfigDict(extra="ignore")
    pid: int
    host: str
    updated_at: str = Field(default_factory=utc_now)
    phase: str = "model"
