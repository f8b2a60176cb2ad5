"""What this machine can run (`agent doctor`): each part the harness needs, found or not, as data, with the
one-line fix for a part that is missing or does not match; and from them, which kinds of work can run here.

The checks reuse the harness's own look-ups (the CUDA install, the GPU via nvidia-smi, the sanitizers, ncu,
the build cache's root), so what doctor says is what an evaluation will find. The parent never initialises
CUDA: the GPU's facts come from nvidia-smi.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from tools.cache import cache_root
from tools.cache.builds import max_bytes
from tools.envinfo import nvidia_smi
from tools.judge._profile import ncu_binary
from tools.judge._sanitizer_tools import asan_runtime, compute_sanitizer
from tools.supervise import _toolchain as toolchain

CheckStatus = Literal["ok", "missing", "mismatch"]

CPU_PROBLEMS = "CPU problems"
CUDA_PROBLEMS = "CUDA problems"
ASAN = "ASan on CPU kernels"
COMPUTE_SANITIZER = "compute-sanitizer on CUDA kernels"
PROFILER = "ncu profiles"
CAPABILITIES = (CPU_PROBLEMS, CUDA_PROBLEMS, ASAN, COMPUTE_SANITIZER, PROFILER)
"""What a check can be needed for, in the order doctor lists them; the agent adds its models' keys."""

MIN_PYTHON = (3, 11)
MIN_FREE_GIB = 4.0  # the build cache's default cap (2 GiB) plus a test run's builds in flight


class MachineCheck(BaseModel):
    """One part of the machine: what was found, and where it is not usable, why and the fix."""

    kind: Literal["machine_check"] = "machine_check"
    name: str
    status: CheckStatus
    found: str
    fix: str = ""
    needed_for: list[str]


class Capability(BaseModel):
    """One kind of work and whether it can run here; `blocked_by` names the checks that stop it."""

    kind: Literal["capability"] = "capability"
    name: str
    ready: bool
    blocked_by: list[str]


class MachineReport(BaseModel):
    kind: Literal["machine_report"] = "machine_report"
    host: str
    checks: list[MachineCheck]
    capabilities: list[Capability]


def check(
    name: str, needed_for: list[str], found: str, fix: str = "", status: CheckStatus = "ok"
) -> MachineCheck:
    """A check: `ok` where no fix is given, else `status` (missing unless said)."""
    if fix and status == "ok":
        status = "missing"
    return MachineCheck(name=name, status=status, found=found, fix=fix, needed_for=needed_for)


def capabilities(checks: list[MachineCheck], names: tuple[str, ...]) -> list[Capability]:
    """Each capability is ready where every check it needs is ok."""
    out = []
    for name in names:
        blocked = [c.name for c in checks if name in c.needed_for and c.status != "ok"]
        out.append(Capability(name=name, ready=not blocked, blocked_by=blocked))
    return out


def _first_line(cmd: list[str]) -> str | None:
    """The first line a tool prints (stdout, else stderr), or None where it does not run."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0].strip() if out.returncode == 0 and text else None


# --- the checks --------------------------------------------------------------------------------------------


def python_check() -> MachineCheck:
    found = platform.python_version()
    if sys.version_info[:2] >= MIN_PYTHON:
        return check("python", [CPU_PROBLEMS], found)
    want = ".".join(map(str, MIN_PYTHON))
    return check("python", [CPU_PROBLEMS], found, f"use Python {want} or newer", "mismatch")


def torch_versions() -> tuple[str | None, str | None]:
    """torch's version and the CUDA it was built for (None for each where torch or its CUDA is absent)."""
    try:
        import torch
    except ImportError:
        return None, None
    return str(torch.__version__), torch.version.cuda


def torch_checks(version: str | None, cuda: str | None) -> list[MachineCheck]:
    if version is None:
        return [check("torch", [CPU_PROBLEMS, CUDA_PROBLEMS], "not installed", "pip install -e '.[dev]'")]
    if cuda is None:
        fix = "pip install torch --index-url https://download.pytorch.org/whl/cu130 (a CUDA build)"
        return [check("torch", [CPU_PROBLEMS], version), check("torch CUDA", [CUDA_PROBLEMS], "none", fix)]
    return [check("torch", [CPU_PROBLEMS], version), check("torch CUDA", [CUDA_PROBLEMS], cuda)]


def nvcc_version(home: str) -> str | None:
    """The CUDA release of `home`'s nvcc ("13.0"), or None where it has none that runs."""
    try:
        out = subprocess.run(
            [str(Path(home) / "bin" / "nvcc"), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"release (\d+\.\d+)", out.stdout)
    return found.group(1) if found else None


def cuda_installs() -> dict[str, str]:
    """CUDA toolkits in the usual place, by release: {"13.0": "/usr/local/cuda-13.0"}."""
    found: dict[str, str] = {}
    for home in sorted(Path("/usr/local").glob("cuda-*")):
        if (release := nvcc_version(str(home))) is not None:
            found.setdefault(release, str(home))
    return found


def nvcc_check(
    home: str | None, release: str | None, torch_cuda: str | None, installs: dict[str, str]
) -> MachineCheck:
    """nvcc, and whether its CUDA is torch's: torch refuses to build an extension across major versions."""
    wanted = torch_cuda or next(iter(installs), "")
    if wanted in installs:
        fix = f"export CUDA_HOME={installs[wanted]}"
    else:
        fix = f"install the CUDA toolkit {wanted} (torch's), then export CUDA_HOME=<its folder>"
    if home is None or release is None:
        return check("nvcc", [CUDA_PROBLEMS], f"not found{f' in {home}' if home else ''}", fix)
    found = f"{release} at {home}"
    if torch_cuda is None or release.split(".")[0] == torch_cuda.split(".")[0]:
        return check(
            "nvcc", [CUDA_PROBLEMS], found + (f", matches torch's {torch_cuda}" if torch_cuda else "")
        )
    return check("nvcc", [CUDA_PROBLEMS], f"{found}, but torch's is {torch_cuda}", fix, "mismatch")


def compiler_check() -> MachineCheck:
    cxx = os.environ.get("CXX", "c++")
    line = _first_line([cxx, "--version"])
    if line is None:
        return check("C++ compiler", [CPU_PROBLEMS], f"{cxx}: not found", "apt-get install g++ (or set CXX)")
    return check("C++ compiler", [CPU_PROBLEMS], line)


def ninja_check() -> MachineCheck:
    line = _first_line(["ninja", "--version"])
    if line is None:
        return check("ninja", [CPU_PROBLEMS], "not found", "pip install ninja")
    return check("ninja", [CPU_PROBLEMS], line)


def gpu_check(smi: dict[str, str] | None, arch: str | None) -> MachineCheck:
    needs = [CUDA_PROBLEMS, COMPUTE_SANITIZER, PROFILER]
    if smi is None or arch is None:
        fix = "CUDA problems need an NVIDIA GPU and its driver (nvidia-smi): run them on a GPU machine"
        return check("GPU", needs, "none (nvidia-smi found none)", fix)
    return check(
        "GPU", needs, f"{smi['name']}, {smi['memory']}, sm_{arch.replace('.', '')}, driver {smi['driver']}"
    )


def disk_check(folder: Path, free_bytes: int) -> MachineCheck:
    free = free_bytes / 2**30
    found = f"{free:.0f} GiB free at {folder} (cap {max_bytes() / 2**30:.0f} GiB)"
    if free >= MIN_FREE_GIB:
        return check("build cache disk", [CPU_PROBLEMS], found)
    fix = f"free {MIN_FREE_GIB:.0f} GiB there, or export KERNEL_AGENT_CACHE=<a folder on a disk with room>"
    return check("build cache disk", [CPU_PROBLEMS], found, fix)


def asan_check() -> MachineCheck:
    runtime = asan_runtime()
    if runtime is None:
        return check("ASan runtime", [ASAN], "not found", "apt-get install libasan8 (GCC's ASan runtime)")
    return check("ASan runtime", [ASAN], runtime)


def compute_sanitizer_check() -> MachineCheck:
    binary = compute_sanitizer()
    if binary is None:
        fix = "install the CUDA toolkit's compute-sanitizer, or export KERNEL_AGENT_COMPUTE_SANITIZER=<its path>"
        return check("compute-sanitizer", [COMPUTE_SANITIZER], "not found", fix)
    return check("compute-sanitizer", [COMPUTE_SANITIZER], binary)


def ncu_check() -> MachineCheck:
    binary = ncu_binary()
    if binary is None:
        return check(
            "ncu",
            [PROFILER],
            "not found",
            "install Nsight Compute (ncu), or export KERNEL_AGENT_NCU=<its path>",
        )
    return check("ncu", [PROFILER], binary)


def counters_check(params: str | None, root: bool, gpu: bool) -> MachineCheck:
    """Whether ncu may read the GPU's counters, from the driver's `RmProfilingAdminOnly` (0: anyone may)."""
    if not gpu:
        return check("GPU counters", [PROFILER], "no GPU", "needs a GPU (above)")
    admin_only = re.search(r"RmProfilingAdminOnly:\s*(\d)", params or "")
    if root or (admin_only and admin_only.group(1) == "0"):
        return check("GPU counters", [PROFILER], "permitted" + (" (root)" if root else ""))
    if admin_only is None:
        return check("GPU counters", [PROFILER], "unknown (driver parameters unreadable): ncu will say")
    fix = "run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0 (ERR_NVGPUCTRPERM)"
    return check("GPU counters", [PROFILER], "admin only", fix)


def driver_params() -> str | None:
    try:
        return Path("/proc/driver/nvidia/params").read_text()
    except OSError:
        return None


def machine_checks() -> list[MachineCheck]:
    """Every check of this machine, in the order doctor prints them."""
    version, cuda = torch_versions()
    home = toolchain.cuda_home()
    smi, arch = nvidia_smi(), toolchain.gpu_arch()
    cache = cache_root()
    return [
        python_check(),
        *torch_checks(version, cuda),
        nvcc_check(home, nvcc_version(home) if home else None, cuda, cuda_installs()),
        compiler_check(),
        ninja_check(),
        gpu_check(smi, arch),
        disk_check(cache, shutil.disk_usage(cache).free),
        asan_check(),
        compute_sanitizer_check(),
        ncu_check(),
        counters_check(driver_params(), os.geteuid() == 0, smi is not None),
    ]


def machine_report(extra: list[MachineCheck], extra_capabilities: tuple[str, ...]) -> MachineReport:
    """The machine's checks, then the caller's own (the agent's API keys), and what they allow."""
    checks = machine_checks() + extra
    return MachineReport(
        host=platform.node(),
        checks=checks,
        capabilities=capabilities(checks, CAPABILITIES + extra_capabilities),
    )
