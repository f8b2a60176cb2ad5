"""What the harness tells workers: the other direction of tools/wire.py.

Each order is a frozen pydantic model that forbids unknown fields. The harness writes it with
`model_dump_json` (a request file, a stdin line, a control-socket datagram) and the receiving process reads
it back with `model_validate_json`, so a key misspelled on one side fails where it is read, not as a
KeyError deep inside a worker. The harness writes every order; none comes from a candidate.

- the truth worker (tools/worker/truth.py): `TruthRequest`, its cases and timing shapes;
- the candidate worker (tools/worker/candidate.py): `CandidateRequest`, which names no seed and no truth;
- the candidate zygote (tools/worker/zygote.py): `ZygoteOrder`, a fork to run or a worker to make ahead.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from tools.kbfile import SizeValue
from tools.problem import Case, Tolerance
from tools.results import BuildInfo, Diagnostic
from tools.wire import ReferenceError_

Device = Literal["cuda", "cpu"]


class _Order(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LoopSettings(_Order):
    """The timing loop's settings (the keyword arguments of tools.worker.timing.measure)."""

    warmup: int
    min_iters: int
    max_iters: int
    target_rse: float
    max_seconds: float


# --- the truth worker -------------------------------------------------------------------------------------


class TruthCase(_Order):
    """One correctness case: its inputs and weights go to `data_path`, its float64 truth to `truth_path`."""

    name: str
    case: Case
    sizes: dict[str, SizeValue]
    pins: dict[str, SizeValue] = Field(default_factory=dict)  # constants overridden: the reference keeps them
    seed: int
    data_path: str
    truth_path: str


class TruthShape(_Order):
    """One timing shape: the base inputs and the truth of the calls at `truth_offsets` (tools/worker/fresh.py),
    the reference timed where `time_reference`. No offsets: the paired check (tools/judge/_paired.py), which
    times the reference and writes nothing."""

    name: str
    sizes: dict[str, SizeValue]
    pins: dict[str, SizeValue] = Field(default_factory=dict)  # constants overridden: the reference keeps them
    seed: int
    truth_offsets: list[int]
    data_path: str
    truth_path: str
    time_reference: bool
    reference_cfg: LoopSettings
    time_launch_free: bool = (
        False  # the reference replayed from a CUDA graph, timed too (tools/worker/launch_free.py)
    )


class TruthRequest(_Order):
    """One evaluation's data and truth. `keep_as` (the warm server only): the timing shapes' truth stays in
    the server, on the device, under this name, for a `RecheckRequest`; no truth file is written for them.
    `tolerance`: the problem's, for the facts each shape's truth reports (`wire.TimingReady`)."""

    kind: Literal["truth"] = "truth"
    reference_source: str
    device: Device
    cases: list[TruthCase] = Field(default_factory=list)
    timing: list[TruthShape] = Field(default_factory=list)
    keep_as: str | None = None
    tolerance: Tolerance | None = None
    threads: int | None = None  # a CPU problem's thread budget (tools.host.timing_threads), from now on


class RecheckShape(_Order):
    """One timing shape's checked calls: `out_path` holds the candidate's outputs by slot, `kept` maps each
    slot to the call it came from; slot k was computed on the inputs of the shape's k-th truth."""

    name: str
    out_path: str
    kept: dict[int, int]
    sizes: dict[str, SizeValue]
    ref_errors: list[ReferenceError_ | None]


class RecheckRequest(_Order):
    """The warm truth server judges timed outputs against the truth it kept under `handle`."""

    kind: Literal["recheck"] = "recheck"
    handle: str
    tolerance: Tolerance
    shapes: list[RecheckShape]


class ForgetRequest(_Order):
    """The evaluation under `handle` has ended: its kept truth is freed."""

    kind: Literal["forget"] = "forget"
    handle: str


ServedRequest = Annotated[TruthRequest | RecheckRequest | ForgetRequest, Field(discriminator="kind")]


class ServedTruthRequest(_Order):
    """One request to the warm truth server (tools/supervise/truth_server.py), one stdin line; its messages
    are told apart from a late one of an earlier request by `id`."""

    id: str
    request: ServedRequest


# --- the candidate worker ---------------------------------------------------------------------------------


class CandidateCase(_Order):
    name: str
    data_path: str
    out_path: str
    profile_range: bool = False  # profile_kernel: the forward call bracketed by cudaProfilerStart/Stop


class CandidateShape(_Order):
    name: str
    data_path: str
    out_path: str
    profile: bool
    cfg: LoopSettings


class CandidateRequest(_Order):
    """Where the candidate's inputs are and where its outputs go: no seeds, no truth. `mode`: "compile"
    (import only), "bench" (cases, then timing once the judge says so), "retime" (timing only).
    `device` and `secret_dirs` (the folders its guard refuses to read) are set by tools.supervise.jobs."""

    mode: Literal["compile", "bench", "retime"]
    cases: list[CandidateCase] = Field(default_factory=list)
    timing: list[CandidateShape] = Field(default_factory=list)
    device: Device = "cpu"
    secret_dirs: list[str] = Field(default_factory=list)
    threads: int | None = None  # a CPU problem's thread budget (tools.host.timing_threads)
    # A CUDA worker asks for the device (`wire.DeviceWanted`) once its CUDA has started, before it imports the
    # candidate, where the harness gates the device for it (an evaluation with device turns): its start holds
    # nothing (tools/worker/device_turn.py). Otherwise the harness holds the device for it from its start.
    device_gated: bool = False


COMPILE = CandidateRequest(mode="compile")


class BuildAnswer(_Order):
    """The harness's answer to a `wire.BuildWanted`, one stdin line: `built` (load `entry` from the build
    cache: only the trusted builder put it there), `refused` (a flag the builder does not run, `message`
    says which) or `failed` (the compiler's `errors`, or why the builder stopped)."""

    status: Literal["built", "refused", "failed"]
    entry: str = ""
    build: BuildInfo | None = None
    errors: list[Diagnostic] = Field(default_factory=list)
    message: str = ""


# --- the candidate zygote ---------------------------------------------------------------------------------

WorkerKind = Literal["cuda", "cpu"]
"""Which worker made ahead of need may serve an order: "cuda" (its CUDA context made) or "cpu"."""


class Containment(_Order):
    """What a fork enters, in the PID-namespace mode (the zygote leaves out what its children cannot)."""

    pidns: bool
    netns: bool
    no_caps: bool
    ipcns: bool = False  # an IPC namespace of its own (System V IPC, POSIX message queues)

    def within(self, pidns: bool, netns: bool, no_caps: bool, ipcns: bool = False) -> Containment:
        """Only what is asked for and also possible."""
        return Containment(
            pidns=self.pidns and pidns,
            netns=self.netns and netns,
            no_caps=self.no_caps and no_caps,
            ipcns=self.ipcns and ipcns,
        )


# The host memory a CUDA worker made ahead pins for its candidate's kept outputs, at most.
MAX_PINNED_AHEAD = 1 << 30
# Workers made ahead at once, at most: one per evaluation a GPU takes and one more (tools/benchmark.py
# `workers_ahead`); each holds a CUDA context (~0.5 GB of device memory) and up to MAX_PINNED_AHEAD pinned.
MAX_PREPARED = 9


class PrepareOrder(_Order):
    """Have `count` workers made ahead of need for evaluations of `kind` (made or being made; one per
    evaluation that may start before the next order: four trajectories on one GPU want five)."""

    op: Literal["prepare"] = "prepare"
    containment: Containment
    kind: WorkerKind
    count: int = Field(default=1, ge=1, le=MAX_PREPARED)
    pinned_bytes: int = Field(default=0, ge=0, le=MAX_PINNED_AHEAD)  # a CUDA worker's, for its kept outputs


class RunOrder(_Order):
    """Fork one candidate worker (its pipes travel beside the order as file descriptors). `kind`: which
    prepared worker may serve it, None for a compile (which must not take the one an evaluation waits for)."""

    op: Literal["run"] = "run"
    containment: Containment
    kind: WorkerKind | None
    cwd: str
    env: dict[str, str]
    request: str  # the path of its CandidateRequest
    seal: str = ""  # the filesystem it may write, a tools.worker.seal.SealSpec as JSON ("": none asked)


ZygoteOrder = Annotated[PrepareOrder | RunOrder, Field(discriminator="op")]
_ZYGOTE_ORDER: TypeAdapter[ZygoteOrder] = TypeAdapter(ZygoteOrder)


def parse_zygote_order(raw: bytes) -> ZygoteOrder:
    """The harness wrote it: an order that does not validate is a harness bug, and raises."""
    return _ZYGOTE_ORDER.validate_json(raw)
