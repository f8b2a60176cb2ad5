"""Typed results of `compile_kernel` and `benchmark`.

Failures are data: every outcome is a result with a `status` and a `message` that tells the author what
to fix; numbers that could not be measured are `None`, never a sentinel like -1.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools.figure_data import Figures
from tools.kbfile import SizeValue

CompileStatus = Literal["ok", "compile_error", "import_error", "timeout", "crashed", "no_device"]
BenchStatus = Literal[
    "ok",  # evaluated: correct and timed
    "incorrect",  # evaluated: some case failed or a disqualifying flag was raised
    "suspect",  # evaluated: outputs correct, timing not trusted (clocks disagreed twice, faster than the floor)
    "compile_error",
    "import_error",
    "timeout",
    "crashed",
    "runtime_error",
    "oom",
    "no_device",
    "harness_error",
]


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Diagnostic(Model):
    """One compiler `error:` line, located in the candidate's own file where that was possible."""

    message: str
    generated_file: str = ""
    generated_line: int | None = None
    candidate_line: int | None = None
    source_line: str = ""


class KernelResources(Model):
    """ptxas -v: per-kernel registers, spills and memory."""

    name: str
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
    shared_bytes: int | None = None


class CompileStep(Model):
    """One compiler run of a build, as the harness's compiler shim recorded it (tools/worker/ccshim.py)."""

    output: str  # the object file (main.o, cuda.cuda.o) or the library
    kind: str  # cxx, nvcc or link
    object: Literal["hit", "miss"] | None = None  # served from the object cache, or compiled
    pch: str | None = None  # the precompiled header: used, built, busy, no_room, build_failed, rejected, ...
    pch_build_s: float = 0.0
    linker: str | None = None
    seconds: float
    rc: int = 0


class BuildInfo(Model):
    name: str
    key: str
    cached: bool
    seconds: float
    ok: bool
    kernels: list[KernelResources] = Field(default_factory=list)
    compiles: list[CompileStep] = Field(default_factory=list)


class CompileResult(Model):
    status: CompileStatus
    message: str
    seconds: float = 0.0
    cached: bool = False
    builds: list[BuildInfo] = Field(default_factory=list)
    errors: list[Diagnostic] = Field(default_factory=list)
    kernels: list[KernelResources] = Field(default_factory=list)
    output: str = Field("", description="bounded head and tail of the candidate's stdout/stderr")
    kernel_hash: str = ""
    containment: list[str] = Field(
        default_factory=list,
        description="what the harness saw contain the candidate's worker: pid_namespace (or process_group), "
        "net_namespace, no_capabilities; each guard missing as 'uncontained: <guard> (why)'",
    )

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class Flag(Model):
    name: str
    message: str
    disqualifying: bool = True


# How a CaseResult's message starts for an added input variant the reference itself is not finite on (not
# judged; tools/problem.py `input_variants`).
NOT_APPLICABLE = "not applicable"
# A timed loop during which other processes kept this share of its CPUs busy ran on a loaded host (a busy
# process on one core of a 2-core machine: ~0.5).
BUSY_ELSEWHERE = 0.25


class CaseResult(Model):
    name: str
    status: Literal["passed", "failed", "error", "skipped"]
    message: str = ""
    sizes: dict[str, SizeValue] = Field(default_factory=dict)
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    worst_index: list[int] | None = None
    worst_value: float | None = None
    worst_expected: float | None = None
    mismatched: int | None = None
    numel: int | None = None
    atol: float | None = Field(None, description="the elementwise bound applied (after calibration)")
    rel_l2_bound: float | None = None
    ref_max_abs_err: float | None = Field(None, description="the fp32 reference's own error on this case")
    ref_rel_l2_err: float | None = None
    seconds: float | None = None


class TimingStats(Model):
    median_ms: float
    rse: float = Field(description="relative standard error of the median")
    n: int
    min_ms: float
    max_ms: float
    mean_ms: float
    host_median_ms: float | None = None
    escaped_median_ms: float | None = Field(
        None,
        description="CUDA: host-clock time from the end event's completion to the end of a device-wide "
        "synchronize, less an idle synchronize's cost (work that escaped the events)",
    )
    launch_median_ms: float | None = Field(None, description="CUDA: host time to issue one call")
    launch_min_ms: float | None = Field(
        None, description="CUDA: the quickest issue of any call (the host's path at its warmest)"
    )
    event_median_ms: float | None = Field(
        None,
        description="CUDA: the events' own median; a call's figure is the longer of its events' time and the "
        "host's time to issue it (launches held: tools/worker/hold.py)",
    )
    hold_median_ms: float | None = Field(
        None, description="CUDA: how long the hold kept the stream before a call"
    )
    exposed_launch_median_ms: float | None = Field(
        None, description="CUDA: the host's issue time the hold did not cover (on the clock)"
    )
    host_bound_calls: int | None = Field(
        None, description="CUDA: calls whose host issue time outlasted their events (the host set the figure)"
    )
    hold: str | None = Field(None, description='CUDA: "ok" where every call was held, else why not')
    clock: Literal["cuda_event", "host"] = "cuda_event"
    batch_ms: float | None = Field(
        None, description="the timed loop's wall time, by the timing process's clock"
    )
    parent_batch_ms: float | None = Field(
        None, description="the same loop's wall time by the evaluator's own clock"
    )
    windows: int | None = Field(
        None,
        description="where set, these stats pool that many loops' medians (the reference's quiet windows on "
        "a device's clock: tools/judge/_paired.py), not one loop's calls: n windows, their median, spread, "
        "fastest and slowest",
    )
    busy_elsewhere: float | None = Field(
        None,
        description="share of the timing process's CPUs that other processes kept busy while the loop ran "
        "(Linux /proc/stat less the process's own CPU time; None elsewhere). At BUSY_ELSEWHERE or more the "
        "host was loaded: the result says so and such a reference median is not cached",
    )
    l2_reset: str | None = Field(
        None,
        description='CUDA: "ok" where every flush followed a reset of persisting L2 lines '
        "(cudaCtxResetPersistingL2Cache), else why not (unavailable, failed)",
    )
    l2_set_aside_bytes: int | None = Field(
        None, description="CUDA: the most L2 set aside for persisting accesses seen after any call (0: none)"
    )
    late_writes: int | None = Field(
        None,
        description="timed calls whose output changed between the end of the call and the harness's read of it "
        "(values at secret positions; tools/worker/late.py): work that finished on no clock",
    )

    @property
    def host_was_busy(self) -> bool:
        return self.busy_elsewhere is not None and self.busy_elsewhere >= BUSY_ELSEWHERE


class HostPeaks(Model):
    """The machine's measured peaks, for the speed-of-light floor (tools/cache/peaks.py): measured once per
    host, device and torch version, then cached. fp32 FLOP/s: on a GPU a loop of dependent FMAs, else (and
    beside it) a large fp32 matmul with TF32 off; memory bandwidth by a large copy. Measured rates, not the
    datasheet's."""

    status: Literal["ok", "unavailable"]
    device: str = Field("", description="cuda or cpu")
    key: str = Field("", description="host | device | torch, the cache's key")
    fp32_tflops: float | None = Field(None, description="the floor's FLOP rate: the higher of the two")
    matmul_tflops: float | None = Field(None, description="what a library fp32 matmul reaches")
    fp16_tensor_tflops: float | None = Field(
        None,
        description="a large fp16 matmul with fp32 accumulation, on tensor cores (CUDA only): the rate the "
        "floor's GEMMs run at, SPLIT_PRODUCTS products each for fp32 accuracy (tools/floor.py)",
    )
    bandwidth_gbs: float | None = None
    method: str = ""
    cached: bool = False
    message: str = ""


class ShapeFloor(Model):
    """The speed-of-light floor of one timed shape: max(compute, bytes / bandwidth), from the problem's
    `floor` and the host's peaks, compute being the non-GEMM FLOPs at fp32 FLOP/s plus the GEMMs' at the
    fp16 tensor rate over SPLIT_PRODUCTS (tools/floor.py); `fraction` is the floor over the kernel's median
    (1.0: at it)."""

    flops: float
    bytes: float
    compute_ms: float | None = None
    memory_ms: float | None = None
    ms: float | None = None
    bound: Literal["compute", "memory"] | None = None
    fraction: float | None = Field(None, description="floor ms / the kernel's median ms")
    gemm_flops: float = Field(0.0, description="the part of `flops` in GEMMs (the spec's `gemm_flops`)")
    tensor_split: bool = Field(
        False,
        description="the GEMMs counted as fp32-accurate split products on tensor cores, not on fp32 units",
    )
    uncertainty: float = Field(0.0, description="share of `ms` a median may be below it (tools/figures.py)")
    message: str = ""


class LaunchFreeReference(Model):
    """The reference's forward replayed from a CUDA graph, timed (tools/worker/launch_free.py); `eager`: the eager
    reference stands in, `note` says why (a CPU problem, a capture that failed)."""

    mode: Literal["graph", "eager"]
    stats: TimingStats | None = Field(None, description="the replays' timing (mode graph)")
    cached: bool = False
    note: str = ""


class ShapeTiming(Model):
    name: str
    primary: bool
    sizes: dict[str, SizeValue]
    candidate: TimingStats | None = None
    reference: TimingStats | None = None
    reference_cached: bool = False
    reference_check: TimingStats | None = Field(
        None, description="the reference timed again briefly beside the candidate (tools/judge/_paired.py)"
    )
    speedup: float | None = Field(None, description="the launch-free reference's median / yours")
    speedup_interval: tuple[float, float] | None = Field(
        None, description="95 % interval of the speedup from the two medians' spreads (tools/judge/_ratio.py)"
    )
    launch_free: LaunchFreeReference | None = Field(None, description="None: a result from before it existed")
    eager_speedup: float | None = Field(
        None, description="the eager reference's median (`reference`) / yours"
    )
    eager_interval: tuple[float, float] | None = None
    rechecked: list[CaseResult] = Field(default_factory=list)
    message: str = ""
    floor: ShapeFloor | None = Field(None, description="speed-of-light floor (problems with a `floor`)")


class KernelUsage(Model):
    """What ran during one profiled call: the candidate's own kernels versus library code."""

    own_calls_per_forward: float | None = None
    own_share: float | None = None
    library_share: dict[str, float] = Field(default_factory=dict)
    top_kernels: list[tuple[str, str, float]] = Field(default_factory=list)  # (name, kind, device-ms)
    method: Literal["cuda_profiler", "cpu_profiler", "extension_calls", "unavailable"] = "unavailable"
    # Host ms from the forward's entry to its first kernel launch (tools/worker/usage.py `first_launch`):
    first_launch: Literal["measured", "not_applicable", "unavailable"] = "unavailable"
    first_launch_ms: float | None = None


class EnvInfo(Model):
    harness_sha: str = ""
    date: str = ""
    host: str = ""
    python: str = ""
    torch: str = ""
    cuda: str | None = None
    gpu: str | None = None
    gpu_clocks: str | None = None
    device: str = ""
    isolation: str = Field(
        "", description="how candidate workers were contained: pid_namespace or process_group"
    )
    containment: list[str] = Field(
        default_factory=list,
        description="this evaluation's candidate workers, as the harness saw them in /proc (CompileResult's)",
    )


CUDA_SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")  # compute-sanitizer's
CPU_SANITIZER_TOOLS = ("asan",)  # ASan and UBSan in one build and run
SanitizerRunStatus = Literal["clean", "errors", "timeout", "failed", "unavailable"]


class SanitizerRun(Model):
    """One sanitizer tool's run of the candidate at one small correctness case (tools/judge/_sanitize.py)."""

    tool: str = Field(description="memcheck, racecheck, initcheck, synccheck (compute-sanitizer) or asan")
    status: SanitizerRunStatus
    errors: int | None = Field(None, description="what the tool's own summary counted; None: no summary")
    flag: str = Field("", description="the flag its findings raise, e.g. sanitizer_memcheck")
    kernel: str = Field("", description="the kernel or function the first finding names")
    first: str = Field("", description="the first lines of the first finding, as the tool wrote them")
    message: str = Field("", description="why it timed out, failed or could not run")
    seconds: float = 0.0
    budget_s: float = 0.0


class SanitizerReport(Model):
    """The sanitizer tools' verdict on one kernel: `flagged` makes a benchmark not correct; `incomplete`
    (a tool timed out or failed) and `unavailable` (no tool here) are said, never read as a pass."""

    status: Literal["clean", "flagged", "incomplete", "unavailable"]
    message: str
    case: str = Field("", description="the correctness case it ran")
    runs: list[SanitizerRun] = Field(default_factory=list)
    seconds: float = 0.0
    budget_s: float = 0.0
    cached: bool = Field(False, description="an earlier report on the same kernel and problem, reused")


class BenchResult(Model):
    status: BenchStatus
    correct: bool
    speedup: float | None = Field(description="vs the launch-free reference; geomean over the timing shapes")
    eager_speedup: float | None = Field(None, description="vs the eager reference; geomean over the shapes")
    figures: Figures | None = Field(None, description="the headline and its figures (tools/figures.py)")
    flags: list[str] = Field(default_factory=list)
    flag_details: list[Flag] = Field(default_factory=list)
    message: str
    problem: str = ""
    problem_hash: str = ""
    kernel_hash: str = ""
    seed: int | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    timings: list[ShapeTiming] = Field(default_factory=list)
    compile: CompileResult | None = None
    usage: KernelUsage | None = None
    env: EnvInfo = Field(default_factory=EnvInfo)
    seconds: float = 0.0
    phases: dict[str, float] = Field(default_factory=dict)  # seconds per phase (tools/judge/_phases.py)
    workers: Literal["cold", "warm"] = Field("cold", description="fresh processes, or warm workers")
    truth_source: Literal["made_now", "made_ahead", "shared"] = "made_now"  # shared: tools/judge/_share.py
    output: str = ""
    notices: list[str] = Field(
        default_factory=list, description="harness facts worth knowing that do not judge the candidate"
    )
    peaks: HostPeaks | None = Field(None, description="the peaks the timings' floors were derived from")
    baselines: BaselineReport | None = Field(None, description="`agent bench --baselines`: trusted baselines")
    sanitizer: SanitizerReport | None = Field(
        None,
        description="compute-sanitizer or ASan on a small case (`agent bench --sanitize`, a run's new bests)",
    )

    @property
    def primary_timing(self) -> ShapeTiming | None:
        return next((t for t in self.timings if t.primary), None)


BaselineKind = Literal["eager", "cuda_graph", "torch_compile", "library"]


class BaselineTiming(Model):
    """One baseline at the primary shape (tools/judge/_baselines.py): how the reference, or a library
    composition of the same math, runs without the candidate; `speedup` is the kernel's against it."""

    name: str = Field(description="eager, cuda_graph, torch_compile, or the composition's file stem")
    kind: BaselineKind
    status: Literal["ok", "failed", "timeout", "unavailable"]
    stats: TimingStats | None = None
    speedup: float | None = Field(None, description="the baseline's median over the kernel's")
    rel_l2_vs_reference: float | None = Field(None, description="its output against the fp32 reference's")
    ready_s: float | None = Field(None, description="seconds to make it ready: a capture, a compile, a build")
    message: str = ""


class BaselineReport(Model):
    shape: str
    baselines: list[BaselineTiming] = Field(default_factory=list)
    seconds: float = 0.0


BenchResult.model_rebuild()  # its `baselines` field names a model defined after it
