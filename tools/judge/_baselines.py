"""`baselines(problem, result)`: what the kernel's speed means against honest alternatives at the primary
shape, each timed on the trusted side (tools/worker/baselines.py, one process per baseline, never beside
a candidate): the eager reference (the benchmark's own reference timing), the reference replayed as a
CUDA graph (CUDA problems), `torch.compile` of the reference under a time limit (a compile that runs out
says so: the naive scan's Python loop did not finish compiling in 560 s on the H200), and each library
composition the spec lists (`baselines:`). The kernel's speedup is reported against each.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools.cache import cache_root
from tools.host import timing_threads
from tools.judge._plan import timing_cfgs
from tools.problem import Problem
from tools.results import BaselineKind, BaselineReport, BaselineTiming, BenchResult, TimingStats
from tools.secret_env import without_secrets
from tools.supervise import WarmPool, cpu_env, pool_for, visible_gpu

# torch.compile of the reference: its compile and its timing ($KERNEL_AGENT_COMPILE_LIMIT seconds, else 300)
COMPILE_LIMIT_ENV = "KERNEL_AGENT_COMPILE_LIMIT"
LIBRARY_LIMIT_S = 600.0  # a composition: its extension's build (once per host, then cached) and its timing
GRAPH_LIMIT_S = 300.0
HARNESS_ROOT = Path(__file__).resolve().parents[2]


def plan(problem: Problem) -> list[tuple[str, BaselineKind, str]]:
    """(name, kind, library path) of every baseline to time beside the eager reference."""
    kinds: list[tuple[str, BaselineKind, str]] = []
    if problem.spec.device == "cuda":
        kinds.append(("cuda_graph", "cuda_graph", ""))
    kinds.append(("torch_compile", "torch_compile", ""))
    for rel in problem.spec.baselines:
        path = (problem.path.parent / rel).resolve()
        kinds.append((path.stem, "library", str(path)))
    return kinds


def _child_env(threads: int | None = None) -> dict[str, str]:
    """`threads`: a CPU problem's budget, as its reference and candidates are timed with."""
    pythonpath = os.pathsep.join(p for p in (str(HARNESS_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    extensions = cache_root() / "baseline_extensions"  # trusted builds, kept apart from the candidates'
    extensions.mkdir(exist_ok=True)
    env = {**without_secrets(), "PYTHONPATH": pythonpath, "TORCH_EXTENSIONS_DIR": str(extensions)}
    return {**env, **cpu_env(threads)}


def _last_json(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(line)
            if isinstance(data, dict) and "status" in data:
                return data
    return None


def run_group(
    cmd: list[str], limit_s: float, cwd: Path, threads: int | None = None
) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr) of `cmd` in a session of its own; None when it ran past `limit_s`, and
    then its whole process group is killed (torch.compile's compile workers with it)."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(threads), cwd=cwd,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    with contextlib.suppress(ProcessLookupError):  # whatever it left running in its session
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout, stderr


def time_one(problem: Problem, name: str, kind: BaselineKind, path: str, limit_s: float) -> BaselineTiming:
    """One baseline in a fresh trusted process, killed at `limit_s`."""
    _, reference_cfg = timing_cfgs(problem)
    request = {
        "kind": kind, "path": path, "device": problem.spec.device, "source": problem.reference_source,
        "sizes": problem.pins(problem.primary), "seed": secrets.randbits(62),
        "cfg": reference_cfg.model_dump(),
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="kagent-baseline-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps(request))
        cmd = [sys.executable, "-m", "tools.worker.baselines", str(req)]
        done = run_group(cmd, limit_s, Path(tmp), timing_threads(problem))
    if done is None:
        what = "did not compile" if kind == "torch_compile" else "did not finish"
        return BaselineTiming(
            name=name, kind=kind, status="timeout", message=f"{what} within {limit_s:.0f} s"
        )
    returncode, stdout, stderr = done
    data = _last_json(stdout)
    if data is None:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return BaselineTiming(
            name=name, kind=kind, status="failed", message=f"exit {returncode}: {tail}"[:700]
        )
    stats = TimingStats.model_validate(data["stats"]) if data.get("stats") else None
    return BaselineTiming(
        name=name, kind=kind, status=data["status"], stats=stats, message=data.get("message", ""),
        rel_l2_vs_reference=data.get("rel_l2_vs_reference"), ready_s=data.get("ready_s"),
    )  # fmt: skip


def limit_of(kind: BaselineKind, compile_limit_s: float) -> float:
    return {"torch_compile": compile_limit_s, "library": LIBRARY_LIMIT_S}.get(kind, GRAPH_LIMIT_S)


def with_speedups(report: BaselineReport, result: BenchResult) -> BaselineReport:
    """Each baseline's median over the kernel's at the primary shape (None: either was not timed)."""
    primary = result.primary_timing
    kernel = primary.candidate if primary is not None and result.correct else None
    items = [
        b.model_copy(update={"speedup": b.stats.median_ms / kernel.median_ms})
        if b.stats is not None and kernel is not None and kernel.median_ms > 0
        else b
        for b in report.baselines
    ]
    return report.model_copy(update={"baselines": items})


def eager_of(result: BenchResult) -> BaselineTiming:
    primary = result.primary_timing
    ref = primary.reference if primary is not None else None
    if ref is None:
        return BaselineTiming(
            name="eager", kind="eager", status="unavailable", message="the reference was not timed"
        )
    return BaselineTiming(name="eager", kind="eager", status="ok", stats=ref, rel_l2_vs_reference=0.0)


def baselines(
    problem: Problem,
    result: BenchResult,
    *,
    compile_limit_s: float | None = None,
    gpu: int | None = None,
    pool: WarmPool | None = None,
) -> BenchResult:
    """`result` with its baselines at the primary shape, each timed now (the device held meanwhile).
    `compile_limit_s`: torch.compile's (default $KERNEL_AGENT_COMPILE_LIMIT, else 300 s)."""
    start = time.monotonic()
    compile_limit_s = compile_limit_s or float(os.environ.get(COMPILE_LIMIT_ENV) or 300.0)
    ev = pool if pool is not None else pool_for(gpu, timing_threads(problem))
    timed = [eager_of(result)]
    with ev.device.exclusive() if ev is not None else contextlib.nullcontext(), visible_gpu(gpu):
        for name, kind, path in plan(problem):
            timed.append(time_one(problem, name, kind, path, limit_of(kind, compile_limit_s)))
    report = BaselineReport(shape=problem.primary.name, baselines=timed, seconds=time.monotonic() - start)
    return result.model_copy(update={"baselines": with_speedups(report, result)})
