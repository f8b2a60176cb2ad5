"""Which sanitizer can run on this machine and how it is called: compute-sanitizer for CUDA problems,
the ASan runtime for CPU ones, each established by a trusted probe once per process (tools/judge/_sanitize.py
runs the candidate under them).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.judge._sanitizer_output import parse_compute_sanitizer
from tools.problem import Problem
from tools.results import (
    CPU_SANITIZER_TOOLS,
    CUDA_SANITIZER_TOOLS,
)
from tools.supervise import _toolchain as toolchain
from tools.supervise import (
    child_env,
    cuda_visible_devices,
    isolation,
)

CUDA_TOOLS = CUDA_SANITIZER_TOOLS[:3]  # the default: memcheck, racecheck, initcheck; synccheck on request
TOOL_BUDGET_S = 120.0  # one compute-sanitizer tool: the worker's start, CUDA under the tool, one case
ASAN_BUDGET_S = 300.0  # the ASan build (~50 s of C++ on 2 cores) and its run
FOUND_EXIT = 86  # the sanitizers' exit code when they found errors (a candidate exiting 86 flags only itself)
LOG_BYTES = 1 << 20
# A compute-sanitizer to use instead of the one found.
COMPUTE_SANITIZER_ENV = "KERNEL_AGENT_COMPUTE_SANITIZER"
PROBE = (
    "import torch; x = torch.ones(64, device='cuda'); torch.cuda.synchronize(); assert float(x.sum()) == 64"
)
PROBE_CPU = "import torch; assert float(torch.ones(64).sum()) == 64"
PROBE_S = 180.0
# Every tensor its own cudaMalloc under compute-sanitizer: the caching allocator's blocks would hide a read
# past a tensor's end from memcheck, and memory an earlier tensor wrote from initcheck.
NO_CACHING = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
# Own allocations are not enough: the driver can place a cudaMalloc whose size is a multiple of its alignment
# right against the next one, so a read a few elements past such a tensor (the real problem's x: 256 KiB at
# its smallest case) lands in another valid allocation and memcheck says nothing (an H100 judged such a kernel
# correct). `--padding` makes the tool put a buffer of this many bytes, owned by no one, after every
# allocation: a read up to 16K floats past any tensor is out of bounds.
PADDING_BYTES = 1 << 16
NO_PADDING = (
    "this compute-sanitizer has no --padding option: a read just past a tensor whose neighbour sits right "
    "behind it may go unseen"
)


# --- what can run here -------------------------------------------------------------------------------------


def compute_sanitizer() -> str | None:
    """compute-sanitizer's path: $KERNEL_AGENT_COMPUTE_SANITIZER, PATH, then the CUDA install's."""
    if chosen := os.environ.get(COMPUTE_SANITIZER_ENV):
        return chosen if Path(chosen).is_file() else None
    if found := shutil.which("compute-sanitizer"):
        return found
    for home in (toolchain.cuda_home(), "/usr/local/cuda"):
        for candidate in (
            Path(home or "/nonexistent") / "bin",
            Path(home or "/nonexistent") / "compute-sanitizer",
        ):
            if (candidate / "compute-sanitizer").is_file():
                return str(candidate / "compute-sanitizer")
    return None


@functools.cache
def asan_runtime() -> str | None:
    """The C++ compiler's ASan runtime (what the worker preloads), or None where it has none."""
    cxx = os.environ.get("CXX", "c++")
    try:
        out = subprocess.run([cxx, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(out.stdout.strip())
    return str(path.resolve()) if out.returncode == 0 and path.is_absolute() and path.exists() else None


def _probe(cmd: list[str], extra: dict[str, str]) -> str:
    """Why `cmd` (trusted: no candidate code) fails inside the candidates' containment, or "" where it exits
    0 there (a tool that cannot work in their namespaces is as unavailable as a missing one)."""
    with tempfile.TemporaryDirectory(prefix="kagent-sanitize-probe-") as tmp:
        env = child_env(Path(tmp), extra)
        try:
            out = subprocess.run(
                isolation.wrap(cmd), cwd=tmp, env=env, capture_output=True, text=True, timeout=PROBE_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
    if out.returncode == 0:
        return ""
    text = out.stdout + out.stderr
    failure = parse_compute_sanitizer(text).tool_failure
    tail = " | ".join(line.strip() for line in text.strip().splitlines()[-3:])
    return (failure or tail or f"exit {out.returncode}")[:300]


@functools.cache
def _cuda_refusal(binary: str, gpu: int | None) -> str:
    if toolchain.gpu_arch() is None:
        return "no CUDA GPU visible (nvidia-smi found none)"
    extra = {"CUDA_VISIBLE_DEVICES": cuda_visible_devices(gpu)} if gpu is not None else {}
    extra |= NO_CACHING
    cmd = [binary, "--tool", "memcheck", "--error-exitcode", str(FOUND_EXIT), sys.executable, "-c", PROBE]
    why = _probe(cmd, extra)
    return f"compute-sanitizer could not check a one-line torch program here: {why}" if why else ""


@functools.cache
def _asan_refusal(runtime: str) -> str:
    why = _probe([_env_binary(), f"LD_PRELOAD={runtime}", sys.executable, "-c", PROBE_CPU], _asan_env(None))
    return f"Python with torch does not start under the ASan runtime ({runtime}): {why}" if why else ""


def _env_binary() -> str:
    return shutil.which("env") or "/usr/bin/env"


def availability(problem: Problem, gpu: int | None = None) -> str:
    """Why this problem's sanitizer cannot run here, or "" where it can (a probe runs once per process)."""
    if problem.spec.device == "cuda":
        binary = compute_sanitizer()
        if binary is None:
            return f"compute-sanitizer not found (on PATH, in CUDA_HOME/bin, or ${COMPUTE_SANITIZER_ENV})"
        return _cuda_refusal(binary, gpu)
    runtime = asan_runtime()
    if runtime is None:
        return f"the C++ compiler ({os.environ.get('CXX', 'c++')}) has no ASan runtime (-print-file-name=libasan.so)"
    return _asan_refusal(runtime)


def default_tools(problem: Problem) -> tuple[str, ...]:
    return CUDA_TOOLS if problem.spec.device == "cuda" else CPU_SANITIZER_TOOLS


def default_budget(tool: str) -> float:
    return ASAN_BUDGET_S if tool == "asan" else TOOL_BUDGET_S


# --- one tool's run ----------------------------------------------------------------------------------------


@functools.cache
def _help(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout + out.stderr


def _option_text(help_text: str, option: str) -> str:
    """The help's paragraph for `option` ("" where this version has no such option)."""
    start = help_text.find(option)
    if start < 0:
        return ""
    end = help_text.find("\n  --", start + len(option))
    return help_text[start : end if end > 0 else None]


def sanitizer_command(binary: str, tool: str, log: Path, help_text: str) -> list[str]:
    """compute-sanitizer's arguments for one tool, using only the options this version lists."""
    cmd = [binary, "--tool", tool, "--error-exitcode", str(FOUND_EXIT), "--print-limit", "20"]
    cmd += ["--log-file", str(log)]
    if _option_text(help_text, "--target-processes"):
        cmd += ["--target-processes", "application-only"]  # not the compilers of a build it may run
    if _option_text(help_text, "--check-exit-code"):
        cmd += ["--check-exit-code", "no"]  # the worker's exit is judged by the harness, not counted here
    if tool == "initcheck" and re.search(r"\ball\b", _option_text(help_text, "--initcheck-address-space")):
        cmd += ["--initcheck-address-space", "all"]  # shared memory too (2025.4 and later)
    if tool == "memcheck" and _option_text(help_text, "--padding"):
        cmd += ["--padding", str(PADDING_BYTES)]  # no allocation directly behind another (above)
    return cmd


def _asan_env(logs: Path | None) -> dict[str, str]:
    """The ASan and UBSan runtimes' settings: stop at the first error with FOUND_EXIT, reports to `logs`.
    No leak checks (torch's allocators keep memory by design), no shadow-gap protection (CUDA's libraries
    map there), no ODR checks (the candidate's and torch's copies of inline globals)."""
    common = f"halt_on_error=1:exitcode={FOUND_EXIT}"
    asan = f"{common}:detect_leaks=0:protect_shadow_gap=0:allocator_may_return_null=1:detect_odr_violation=0"
    ubsan = f"{common}:print_stacktrace=1"
    if logs is not None:
        asan, ubsan = f"{asan}:log_path={logs / 'asan'}", f"{ubsan}:log_path={logs / 'ubsan'}"
    return {"ASAN_OPTIONS": asan, "UBSAN_OPTIONS": ubsan}
