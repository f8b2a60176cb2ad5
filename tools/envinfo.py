"""Where a result was measured: harness git SHA, host, torch/CUDA, GPU name and clocks.

The parent never initialises CUDA: GPU facts come from nvidia-smi or from a short-lived probe process.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime

from pydantic import TypeAdapter

from tools.cache import cache_root
from tools.host import timing_threads
from tools.problem import Problem
from tools.results import EnvInfo
from tools.supervise import HARNESS_ROOT, isolation


@functools.cache
def harness_sha() -> str:
    """The harness commit; where the tree has no .git (a copied tree), KERNEL_AGENT_HARNESS_SHA says it."""
    if os.environ.get("KERNEL_AGENT_HARNESS_SHA"):
        return os.environ["KERNEL_AGENT_HARNESS_SHA"]
    try:
        out = subprocess.run(
            ["git", "-C", str(HARNESS_ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        sha = out.stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(HARNESS_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return f"{sha}{'-dirty' if dirty else ''}" if sha else "unknown"


@functools.cache
def nvidia_smi() -> dict[str, str] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version,memory.total",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 6:
        return None
    keys = ("name", "sm_clock", "max_sm_clock", "mem_clock", "driver", "memory")
    return dict(zip(keys, parts, strict=True))


def collect_env(problem: Problem) -> EnvInfo:
    import torch

    smi = nvidia_smi() if problem.spec.device == "cuda" else None
    return EnvInfo(
        harness_sha=harness_sha(),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        host=platform.node(),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=smi["name"] if smi else None,
        gpu_clocks=f"sm {smi['sm_clock']} (max {smi['max_sm_clock']}), mem {smi['mem_clock']}"
        if smi
        else None,
        device=problem.spec.device,
        isolation=isolation.mode(),
    )


_PROBE = r"""
import json, time, torch
p = torch.cuda.get_device_properties(0)
a = torch.empty(1 << 28, dtype=torch.float32, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True)
s.record()
for _ in range(10): b.copy_(a)
e.record(); torch.cuda.synchronize()
bw = 10 * 2 * a.numel() * 4 / (s.elapsed_time(e) / 1e3) / 1e12
print(json.dumps({"name": p.name, "sms": p.multi_processor_count, "memory_gb": p.total_memory / 2**30,
                  "l2_mb": getattr(p, "L2_cache_size", 0) / 2**20, "cc": f"{p.major}.{p.minor}", "copy_tbps": bw}))
"""


_PROBED: TypeAdapter[dict[str, object]] = TypeAdapter(dict[str, object])


def _gpu_probe() -> dict[str, object] | None:
    """SMs, memory, L2 and a measured copy bandwidth, cached per host (a few seconds, once)."""
    path = cache_root() / f"gpu-{platform.node()}.json"
    if path.is_file():
        return _PROBED.validate_json(path.read_text())
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        info = _PROBED.validate_json(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    path.write_text(json.dumps(info))
    return info


def hardware_summary(problem: Problem) -> str:
    """A few lines on the machine the candidate will be timed on, for the agent's system prompt."""
    cores = os.cpu_count() or 1
    cpu = platform.processor() or platform.machine()
    if problem.spec.device == "cpu":
        threads = timing_threads(problem)
        return (
            f"CPU: {cpu}, {cores} cores. The reference and your kernel are each timed (host clock) on {threads} "
            f"of them with {threads} thread(s): OMP_NUM_THREADS={threads} and torch.set_num_threads({threads}); "
            "more threads than that only share those CPUs. Both run with a heap that keeps the memory they free "
            "(glibc MALLOC_MMAP_MAX_=0, no trimming), as CUDA's caching allocator does: after the first call an "
            "allocation costs no page faults."
        )
    info = _gpu_probe()
    if info is None:
        return f"GPU: none visible on this host ({cores} CPU cores); benchmark will report no_device."
    return (
        f"GPU: {info['name']} (compute capability {info['cc']}, {info['sms']} SMs, {info['memory_gb']:.0f} GiB, "
        f"L2 {info['l2_mb']:.0f} MiB); measured device-to-device copy {info['copy_tbps']:.2f} TB/s "
        f"(bytes read + written). Host: {cores} CPU cores."
    )
