"""`profile(problem, kernel_code)`: Nsight Compute (`ncu`) on the candidate at the problem's primary shape,
digested per kernel (tools/judge/_ncu_output.py).

The candidate worker runs as ncu's child inside the usual containment (a cold worker, as under the
sanitizer: `tools.supervise.run_candidate(wrapper=...)`), on one call at the primary shape whose inputs the
truth worker made; the worker brackets that call with cudaProfilerStart/Stop, so ncu sees the forward's
kernels and none of the harness's. No root: `--clock-control none` (the GPU's own clocks: locking them
needs privileges the H200 host does not give) and `--target-processes application-only` (not the build's
compilers). ncu writes its report into a folder the candidate's guard refuses to read; a trusted `ncu
--import` reads it back as CSV. The profile informs the model and judges nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from tools import orders, wire
from tools.host import timing_threads
from tools.judge._compile import compile_result
from tools.judge._ncu_output import digest, merge_by_name, parse_launches
from tools.judge._sanitize import _case_data, _limited
from tools.problem import Case, Problem
from tools.profile_results import KernelProfile, ProfileResult
from tools.results import CompileResult, KernelResources
from tools.supervise import Job, WarmPool, describe_exit, kernel_hash, pool_for, run_candidate, visible_gpu
from tools.supervise import _toolchain as toolchain
from tools.worker.instrument import kernel_names

NCU_ENV = "KERNEL_AGENT_NCU"  # an ncu to use instead of the one found
PROFILE_BUDGET_S = 300.0  # the worker's start and import (a build, where not cached), then ncu's replays
IMPORT_TIMEOUT_S = 120.0
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats")
MAX_LAUNCHES = 200  # a forward launching more is cut there (each costs ncu a replay per metric pass)
# ncu's own words for "this user may not read the GPU's counters" (NVIDIA's ERR_NVGPUCTRPERM).
NO_PERMISSION = re.compile(r"ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters", re.I)
ELSEWHERE_CUDA = (
    "here: compile_kernel reports ptxas registers, spills and shared memory per kernel; on a machine with "
    "a GPU and ncu, benchmark reports each kernel kind's share of device time and the % of the floor"
)
ELSEWHERE_CPU = (
    "here: benchmark reports the time in your own extension's calls against library code, and each shape's "
    "% of the speed-of-light floor (Nsight Compute has nothing to profile on the CPU)"
)


def ncu_binary() -> str | None:
    """ncu's path: $KERNEL_AGENT_NCU, PATH, then the CUDA install's bin."""
    if chosen := os.environ.get(NCU_ENV):
        return chosen if Path(chosen).is_file() else None
    if found := shutil.which("ncu"):
        return found
    for home in (toolchain.cuda_home(), "/usr/local/cuda"):
        candidate = Path(home or "/nonexistent") / "bin" / "ncu"
        if candidate.is_file():
            return str(candidate)
    return None


def unavailable(problem: Problem) -> ProfileResult | None:
    """Why ncu cannot profile this problem here, as a result; None where it can try."""
    if problem.spec.device != "cuda":
        why = "profile_kernel runs Nsight Compute, which profiles CUDA kernels"
        return ProfileResult(status="unavailable", message=why, measurable_here=ELSEWHERE_CPU)
    if ncu_binary() is None:
        why = f"Nsight Compute (ncu) not found (on PATH, in CUDA_HOME/bin, or ${NCU_ENV})"
        return ProfileResult(status="unavailable", message=why, measurable_here=ELSEWHERE_CUDA)
    if toolchain.gpu_arch() is None:
        why = "no CUDA GPU visible (nvidia-smi found none)"
        return ProfileResult(status="unavailable", message=why, measurable_here=ELSEWHERE_CUDA)
    return None


def ncu_command(binary: str, report: Path) -> list[str]:
    cmd = [binary, "--clock-control", "none", "--target-processes", "application-only"]
    cmd += ["--profile-from-start", "off", "--launch-count", str(MAX_LAUNCHES)]
    for section in SECTIONS:
        cmd += ["--section", section]
    return [*cmd, "--export", str(report), "--force-overwrite"]


def import_pages(binary: str, report: Path) -> tuple[list[str], str]:
    """The report's details and raw pages as CSV text, and "" or why they could not be read."""
    pages: list[str] = []
    for page in ("details", "raw"):
        cmd = [binary, "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return pages, f"ncu --import failed: {exc}"[:300]
        if out.returncode != 0:
            return pages, f"ncu --import exited {out.returncode}: {out.stderr.strip()[-300:]}"
        pages.append(out.stdout)
    return pages, ""


def profile_problem(problem: Problem) -> tuple[Problem, str]:
    """The problem with one correctness case: the primary timing shape's sizes (its data made as a case's)."""
    shape = problem.primary
    case = Case(name=f"profile.{shape.name}", sizes=shape.sizes, why="profile_kernel: the primary shape")
    spec = problem.spec.model_copy(update={"correctness": [case], "input_variants": []})
    return problem.model_copy(update={"spec": spec}), case.name


def base_name(kernel: str) -> str:
    """`void ns::scan_fwd<4>(const float *, …)` -> `scan_fwd`: the name ptxas and the source use."""
    head = re.split(r"[(<]", kernel.removeprefix("void "), maxsplit=1)[0]
    return head.rsplit("::", 1)[-1].strip()


def with_spills(profile: KernelProfile, resources: list[KernelResources]) -> KernelProfile:
    name = base_name(profile.name)
    found = next((r for r in resources if name and name in r.name), None)
    if found is None:
        return profile
    return profile.model_copy(update={"spill_stores": found.spill_stores, "spill_loads": found.spill_loads})


def digest_report(pages: list[str], own: set[str], compiled: CompileResult | None) -> list[KernelProfile]:
    # Imported here: tools.worker.usage imports torch's cpp_extension, whose import warns on a machine
    # without CUDA (into `agent show`'s stderr, which imports this module for the tool's text).
    from tools.worker.usage import classify_kernel

    resources = compiled.kernels if compiled is not None else []
    profiles = [digest(launch, classify_kernel(launch.name, own)) for launch in parse_launches(*pages)]
    return [with_spills(p, resources) if p.kind == "own" else p for p in merge_by_name(profiles)]


def shares(kernels: list[KernelProfile]) -> tuple[float | None, dict[str, float], float | None]:
    """(own share, library share by kind, total µs) of the profiled device time."""
    total = sum(k.duration_us or 0.0 for k in kernels)
    if total <= 0:
        return None, {}, None
    by_kind: dict[str, float] = {}
    for k in kernels:
        by_kind[k.kind] = by_kind.get(k.kind, 0.0) + (k.duration_us or 0.0) / total
    own = by_kind.pop("own", 0.0)
    return own, by_kind, total


def _run(problem: Problem, kernel_code: str, job: Job, ev: WarmPool | None, binary: str) -> ProfileResult:
    shaped, case = profile_problem(problem)
    shape = {"shape": problem.primary.name, "sizes": problem.sizes_of(problem.primary)}
    items, hidden, failed = _case_data(shaped, case, job, ev=None)  # cold truth: keyed on its own problem
    if failed:
        return ProfileResult(status="failed", message=failed, **shape)
    logs = job.root / "ncu"
    logs.mkdir(mode=0o700)
    report = logs / "profile"
    request = orders.CandidateRequest(
        mode="bench", cases=[items[0].model_copy(update={"profile_range": True})]
    )
    outcome = run_candidate(
        job, _limited(shaped, PROFILE_BUDGET_S), request, secrets=hidden, wrapper=ncu_command(binary, report),
        secret_dirs=[logs, *([ev.staging] if ev else [])], budget_s=PROFILE_BUDGET_S,
        on_message=lambda msg: "stop" if isinstance(msg, wire.CasesDone) else None,
        call_bounds={("case", case): PROFILE_BUDGET_S}, writable=[logs],  # ncu writes its report there
    )  # fmt: skip
    compiled = compile_result(outcome, kernel_hash(kernel_code))
    base = {**shape, "compile": compiled, "seconds": outcome.seconds, "output": outcome.output[-2000:]}
    if compiled.status in ("compile_error", "import_error"):
        return ProfileResult(status=compiled.status, message=compiled.message, **base)
    if NO_PERMISSION.search(outcome.output):
        why = "ncu may not read this GPU's performance counters as this user (ERR_NVGPUCTRPERM)"
        return ProfileResult(status="unavailable", message=why, measurable_here=ELSEWHERE_CUDA, **base)
    if outcome.timed_out:
        return ProfileResult(status="timeout", message=f"the profile {describe_exit(outcome)}", **base)
    saved = report.with_suffix(".ncu-rep")
    if not saved.is_file():
        ended = outcome.first(wire.Failed)
        why = f"{ended.error}: {ended.message[-400:]}" if ended else describe_exit(outcome)
        return ProfileResult(status="failed", message=f"ncu wrote no report: {why}", **base)
    pages, why = import_pages(binary, saved)
    if why:
        return ProfileResult(status="failed", message=why, **base)
    kernels = digest_report(pages, kernel_names(kernel_code), compiled)
    if not kernels:
        return ProfileResult(status="failed", message="ncu profiled no kernel in the forward call", **base)
    own, library, total = shares(kernels)
    message = f"{sum(k.launches for k in kernels)} kernel launches profiled at {problem.primary.name}"
    return ProfileResult(
        status="ok", message=message, kernels=kernels, own_share=own, library_share=library, total_us=total,
        tool=binary, **base,
    )  # fmt: skip


def profile(
    problem: Problem, kernel_code: str, *, gpu: int | None = None, pool: WarmPool | None = None
) -> ProfileResult:
    """Nsight Compute on the candidate at the primary shape. `gpu`, `pool`: as for `benchmark` (the device
    is held while ncu replays the kernels)."""
    start = time.monotonic()
    refused = unavailable(problem)
    if refused is not None:
        return refused.model_copy(update={"kernel_hash": kernel_hash(kernel_code)})
    binary = ncu_binary() or "ncu"
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))
    with ev.device.exclusive() if ev is not None else contextlib.nullcontext(), visible_gpu(gpu):
        job = Job.create(kernel_code, ev.jobs_dir if ev else None)
        try:
            result = _run(problem, kernel_code, job, ev, binary)
        finally:
            job.cleanup()
    return result.model_copy(
        update={"seconds": time.monotonic() - start, "kernel_hash": kernel_hash(kernel_code)}
    )
