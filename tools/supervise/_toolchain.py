"""The machine's CUDA toolchain, found without initialising CUDA in the harness's process."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path


@functools.cache
def cuda_home() -> str | None:
    """The real CUDA install; the `nvcc` on PATH may be a wrapper whose parent dir is not CUDA_HOME."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    try:
        out = subprocess.run(
            ["nvcc", "--dryrun", "-x", "cu", "-E", "/dev/null"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if "TOP=" in line:
            return str(Path(line.split("TOP=", 1)[1].strip()).resolve())
    return None


@functools.cache
def gpu_arch() -> str | None:
    """The visible GPU's compute capability via nvidia-smi (the parent never initialises CUDA)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    return first or None
