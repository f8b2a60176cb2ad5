"""What workers tell the parent: one typed message per line, on a pipe the parent owns.

Every message is a pydantic model with a `Literal` `event` tag; the parent reads a line back through a
discriminated union (`parse_worker_message`) and counts anything that does not validate as a bad message,
never trusting it. Workers (tools.worker) send with `Channel.send(Message(...))`; the parent's readers are
in tools.supervise. The zygote's control socket carries its own union (`ZygoteReport`). The other
direction, what the harness asks of a worker, is tools/orders.py.

A candidate's code runs in the same process as the candidate worker and can write to this channel too:
validation gives a message its shape, not authority. The parent accepts from the candidate side only what
it cross-checks (tools.judge).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tools.results import BuildInfo, CaseResult, Diagnostic, KernelUsage, LaunchFreeReference, TimingStats


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- both workers ---------------------------------------------------------------------------------------


class Ready(_Message):
    """The worker has imported torch and the harness (the phase breakdown starts here); a warm truth
    server also says it with the request's `id` when it takes a request."""

    event: Literal["ready"] = "ready"
    id: str | None = None


class NoDevice(_Message):
    event: Literal["no_device"] = "no_device"
    message: str


class Done(_Message):
    event: Literal["done"] = "done"


# --- the candidate worker -----------------------------------------------------------------------------


class CudaReady(_Message):
    event: Literal["cuda_ready"] = "cuda_ready"


class Building(_Message):
    """A fresh build (not a cache hit) is under way: the outputs its compiler runs are making now (objects,
    then the library), and how many have finished. Sent when that changes; for a live display only."""

    event: Literal["building"] = "building"
    extension: str
    compiling: list[str] = Field(default_factory=list, max_length=64)
    finished: int = 0


BuildProgress = Callable[[Building], None]
"""Hears what a fresh build is compiling while it runs (the worker's channel; a live display)."""


class BuildCall(_Message):
    """One `load_inline` as the candidate called it (normalised by tools/worker/build.py): what the trusted
    builder compiles, and all that its cache key covers besides the toolchain's versions."""

    name: str
    cpp_sources: list[str]
    cuda_sources: list[str] | None = None
    functions: list[str] | dict[str, str] | str | None = None
    extra_cflags: list[str] | None = None
    extra_cuda_cflags: list[str] | None = None
    extra_ldflags: list[str] | None = None
    extra_include_paths: list[str] | None = None
    with_cuda: bool | None = None
    is_python_module: bool = True
    with_pytorch_error_handling: bool = True
    no_implicit_headers: bool = False


class BuildWanted(_Message):
    """The candidate's `load_inline` missed the cache: it asks the harness to build `call` (its trusted
    builder, tools/supervise/builder.py) and waits for the answer on stdin (`orders.BuildAnswer`)."""

    event: Literal["build_wanted"] = "build_wanted"
    call: BuildCall
    kernel_source: str = ""  # the candidate's file as text: compiler errors are placed at its lines


class Built(_Message):
    """The trusted builder's report (tools/worker/builder.py): the entry it published (`<name>-<key>`), or
    why it could not build (`errors` located in the candidate's lines)."""

    event: Literal["built"] = "built"
    ok: bool
    entry: str = ""
    build: BuildInfo
    errors: list[Diagnostic] = Field(default_factory=list)
    message: str = ""


class Imported(_Message):
    """The candidate imported (its load_inline builds ran or came from the cache)."""

    event: Literal["imported"] = "imported"
    seconds: float
    builds: list[BuildInfo] = Field(default_factory=list)
    failed_build: bool = False
    errors: list[Diagnostic] = Field(default_factory=list)
    has_model_new: bool


class ImportFailed(_Message):
    event: Literal["import_failed"] = "import_failed"
    kind: Literal["compile_error", "import_error"]
    message: str
    builds: list[BuildInfo] = Field(default_factory=list)
    errors: list[Diagnostic] = Field(default_factory=list)
    seconds: float


class Violation(_Message):
    """The runtime guard saw a forbidden act (the judge accepts only the flag names the guard can give)."""

    event: Literal["violation"] = "violation"
    kind: str
    flag: str
    detail: str


class Start(_Message):
    event: Literal["start"] = "start"
    kind: Literal["case", "timing"]
    name: str


class CaseDone(_Message):
    event: Literal["case_done"] = "case_done"
    name: str
    seconds: float
    mutated: bool
    timers: list[str] = Field(default_factory=list)


class Failed(_Message):
    event: Literal["failed"] = "failed"
    kind: Literal["case", "timing"]
    name: str
    error: str
    message: str


class CasesDone(_Message):
    """Every case ran; the worker waits on stdin for the judge's answer (`time` or `stop`)."""

    event: Literal["cases_done"] = "cases_done"


class BatchBegin(_Message):
    event: Literal["batch_begin"] = "batch_begin"
    name: str


class BatchEnd(_Message):
    event: Literal["batch_end"] = "batch_end"
    name: str


class Tick(_Message):
    """The timing loop moves on (at most every half second, outside the timed region)."""

    event: Literal["tick"] = "tick"
    name: str


class Profiling(_Message):
    event: Literal["profiling"] = "profiling"
    name: str


class NextCall(_Message):
    """Before each call of a shape's timing loop (warm-ups have negative indices): the worker asks the judge
    for the call's input offset (tools/worker/fresh.py). `wants_stop`: the loop's own rule says it is done
    (enough samples at the target spread, its time, or its count); the judge answers on stdin with
    `go OFFSET` or `stop`, either followed by ` keep SLOT` when the previous call's output is to be kept."""

    event: Literal["next_call"] = "next_call"
    name: str
    index: int
    wants_stop: bool = False


class TimingDone(_Message):
    event: Literal["timing_done"] = "timing_done"
    name: str
    stats: TimingStats
    host_ms: list[float] = Field(default_factory=list)
    device_ms: list[float] = Field(default_factory=list)
    calls: int
    repeated: int = 0  # timed calls whose output matched an earlier call's although their inputs differed
    nonfinite: int = 0  # timed calls whose output held NaN or inf
    checked: int = 0
    mutated: bool = False
    timers: list[str] = Field(default_factory=list)
    usage: KernelUsage | None = None


class Retime(_Message):
    """A re-measurement worker: no cases, only the shapes whose clocks disagreed."""

    event: Literal["retime"] = "retime"


# --- the truth worker ---------------------------------------------------------------------------------


class CaseReady(_Message):
    """One case's inputs, weights and truth are written; the fp32 reference's own error on it."""

    event: Literal["case_ready"] = "case_ready"
    name: str
    shape: list[int]
    ref_max_abs_err: float
    ref_rel_l2_err: float
    ref_call_s: float


class ReferenceError_(_Message):  # noqa: N801 - "ReferenceError" is a Python builtin
    """The fp32 reference's own error on one input set, and the time of that one call."""

    ref_max_abs_err: float
    ref_rel_l2_err: float
    ref_call_s: float


class TimingReady(_Message):
    event: Literal["timing_ready"] = "timing_ready"
    name: str
    shifted: list[tuple[int, int]] = Field(
        default_factory=list, description="(position, numel) of the inputs a call's offset shifts"
    )
    reference: TimingStats | None = None
    launch_free: LaunchFreeReference | None = None  # where asked (orders.TruthShape.time_launch_free)
    ref_errors: list[ReferenceError_] = Field(default_factory=list)
    reference_seconds: float
    # Facts of the shape's truth, so that the judge needs the truth itself only to compare outputs with it:
    truth_finite: bool = True  # every checked call's truth is finite
    truth_varies: bool = True  # the checked calls' truths differ (their inputs' contents do)
    constant_passes: bool = False  # one value everywhere would pass the first call's truth
    out_numel: int = 0  # elements of one call's output: what its kept outputs take (WarmPool.expect_kept)


class Rechecked(_Message):
    """The warm truth server's verdict on one shape's checked calls (an `orders.RecheckRequest`)."""

    event: Literal["rechecked"] = "rechecked"
    name: str
    results: list[CaseResult]


class TruthError(_Message):
    event: Literal["error"] = "error"
    where: str
    message: str
    traceback: str = ""


class DeviceWanted(_Message):
    """The warm truth server is about to use the device (`mode`: shared for its truth and re-checks,
    exclusive for timing the reference) and waits for `granted` on stdin: the harness first takes that
    turn on the device lock, so its work never runs beside another evaluation's timed loop. A candidate's
    worker asks it (granted shared) before a timing shape's device work, after a `DeviceReleased`."""

    event: Literal["device_wanted"] = "device_wanted"
    mode: Literal["shared", "exclusive"]


class DeviceReleased(_Message):
    """The truth server's device work since its last `DeviceWanted` has finished (synchronised); or a
    candidate worker's, for a timing shape (tools/worker/device_turn.py)."""

    event: Literal["device_released"] = "device_released"


class RequestFinished(_Message):
    """The warm truth server finished one request."""

    event: Literal["finished"] = "finished"
    id: str
    returncode: int


WorkerMessage = Annotated[
    Ready
    | NoDevice
    | Done
    | CudaReady
    | Building
    | BuildWanted
    | Built
    | Imported
    | ImportFailed
    | Violation
    | Start
    | CaseDone
    | Failed
    | CasesDone
    | BatchBegin
    | BatchEnd
    | Tick
    | NextCall
    | Profiling
    | TimingDone
    | Retime
    | CaseReady
    | TimingReady
    | TruthError
    | RequestFinished
    | DeviceWanted
    | DeviceReleased
    | Rechecked,
    Field(discriminator="event"),
]
_WORKER_MESSAGE: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)


def parse_worker_message(raw: bytes | str) -> WorkerMessage | None:
    """One channel line as a typed message, or None where it is not one (malformed, unknown, forged)."""
    try:
        return _WORKER_MESSAGE.validate_json(raw)
    except ValidationError:
        return None


class Channel:
    """The worker's end of the result channel: one JSON object per line."""

    def __init__(self, fd: int) -> None:
        self._stream = os.fdopen(fd, "wb", buffering=0)
        self._lock = threading.Lock()  # a build's progress is sent from a thread of its own

    def send(self, message: _Message) -> None:
        line = message.model_dump_json().encode() + b"\n"
        with self._lock:
            self._stream.write(line)


# --- the zygote's control socket ----------------------------------------------------------------------


class ZygoteReady(_Message):
    event: Literal["ready"] = "ready"
    pid: int
    pidns: bool
    cuda_fork: str  # "ok", "no_gpu", or why CUDA cannot start in its children
    # Why its children cannot enter a network namespace / drop their capabilities ("" where they can).
    # Only the reason a guard is missing: that a guard is in force the harness sees itself, in /proc.
    netns_refused: str = ""
    no_caps_refused: str = ""
    ipcns_refused: str = ""


class Spawned(_Message):
    event: Literal["spawned"] = "spawned"
    pid: int
    prepared: bool  # served by the worker made ahead of need


class Exited(_Message):
    event: Literal["exited"] = "exited"
    pid: int
    returncode: int


class Preparing(_Message):
    event: Literal["preparing"] = "preparing"
    pid: int


class WorkerPrepared(_Message):
    event: Literal["prepared"] = "prepared"
    pid: int


class PrepareFailed(_Message):
    event: Literal["prepare_failed"] = "prepare_failed"
    pid: int


ZygoteReport = Annotated[
    ZygoteReady | Spawned | Exited | Preparing | WorkerPrepared | PrepareFailed, Field(discriminator="event")
]
_ZYGOTE_REPORT: TypeAdapter[ZygoteReport] = TypeAdapter(ZygoteReport)


def parse_zygote_report(raw: bytes) -> ZygoteReport:
    """The zygote is harness code that never ran a candidate: a report that does not validate is a bug."""
    return _ZYGOTE_REPORT.validate_json(raw)
